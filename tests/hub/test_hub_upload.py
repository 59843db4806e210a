"""Uploads against the loopback stand-in for the Hub's HTTP API (real ``huggingface_hub``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from fake_hub import FakeHub
from hub_samples import build_folder

from contagent.charts.export_charts import summary_charts
from contagent.core.rows import RowSummary
from contagent.errors import ContagentError
from contagent.hub.upload import push_export_to_hub, upload_dataset_folder

EXPORT_SUBDIR = "prime-sft"

REPO = "acme/agent-sft"


def _local_files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_first_upload_is_one_commit_with_card_and_shards(tmp_path: Path, fake_hub: FakeHub) -> None:
    folder = tmp_path / "prime-sft"
    build_folder(folder, n_rows=10, shard_rows=4)
    result = upload_dataset_folder(
        folder, REPO, message="first export", token="hf_write", endpoint=fake_hub.url
    )
    local = _local_files(folder)
    assert sorted(local) == [
        "README.md",
        "data/train-00000-of-00003.parquet",
        "data/train-00001-of-00003.parquet",
        "data/train-00002-of-00003.parquet",
        *(
            f"images/{c.slug}.png"
            for c in sorted(summary_charts(RowSummary()), key=lambda c: c.slug)
        ),
    ]
    (commit,) = fake_hub.commits
    assert commit.summary == "first export"
    assert commit.revision == "main"
    assert commit.files == local  # every path, every byte
    assert sorted(commit.lfs_paths) == sorted(p for p in local if p.endswith(".parquet"))
    assert commit.deleted == []
    assert sorted(fake_hub.lfs_puts) == sorted(
        hashlib.sha256(b).hexdigest() for p, b in local.items() if p.endswith(".parquet")
    )
    assert fake_hub.files(REPO) == local
    assert fake_hub.repos[REPO].private is True
    assert result.committed and result.private
    assert result.commit_oid == commit.oid
    assert result.commit_url == f"{fake_hub.url}/datasets/{REPO}/commit/{commit.oid}"
    assert result.repo_url == f"{fake_hub.url}/datasets/{REPO}"
    assert sorted(result.files_uploaded) == sorted(local)
    assert result.files_skipped == [] and result.files_deleted == []


def test_same_folder_twice_does_not_duplicate(tmp_path: Path, fake_hub: FakeHub) -> None:
    folder = tmp_path / "prime-sft"
    build_folder(folder, n_rows=10, shard_rows=4)
    first = upload_dataset_folder(folder, REPO, token="hf_write", endpoint=fake_hub.url)
    puts = len(fake_hub.lfs_puts)
    second = upload_dataset_folder(folder, REPO, token="hf_write", endpoint=fake_hub.url)
    assert len(fake_hub.commits) == 1
    assert len(fake_hub.lfs_puts) == puts
    assert not second.committed
    assert second.commit_oid == first.commit_oid
    assert sorted(second.files_skipped) == sorted(_local_files(folder))
    assert second.files_uploaded == [] and second.files_deleted == []
    assert fake_hub.files(REPO) == _local_files(folder)


def test_re_export_with_fewer_shards_deletes_stale_ones(tmp_path: Path, fake_hub: FakeHub) -> None:
    folder = tmp_path / "prime-sft"
    build_folder(folder, n_rows=10, shard_rows=3)  # 4 shards
    upload_dataset_folder(folder, REPO, token="hf_write", endpoint=fake_hub.url)
    build_folder(folder, n_rows=5, shard_rows=3)  # 2 shards, new card
    result = upload_dataset_folder(folder, REPO, token="hf_write", endpoint=fake_hub.url)
    local = _local_files(folder)
    assert fake_hub.files(REPO) == local  # exactly the new set: nothing stale, nothing twice
    second = fake_hub.commits[-1]
    assert len(fake_hub.commits) == 2
    assert sorted(second.deleted) == [
        "data/train-00000-of-00004.parquet",
        "data/train-00001-of-00004.parquet",
        "data/train-00002-of-00004.parquet",
        "data/train-00003-of-00004.parquet",
    ]
    # the charts drew the same figures, so they are left out of the second commit
    assert second.files == {p: b for p, b in local.items() if not p.startswith("images/")}
    assert sorted(result.files_deleted) == second.deleted


def test_revision_creates_branch_and_leaves_main(tmp_path: Path, fake_hub: FakeHub) -> None:
    folder = tmp_path / "prime-sft"
    build_folder(folder, n_rows=3, shard_rows=2)
    result = upload_dataset_folder(
        folder, REPO, revision="v2", token="hf_write", endpoint=fake_hub.url
    )
    assert result.revision == "v2"
    assert fake_hub.files(REPO, "v2") == _local_files(folder)
    assert fake_hub.files(REPO, "main") == {}
    assert [c.revision for c in fake_hub.commits] == ["v2"]
    # The branch exists now; a second upload to it is a no-op, not an error.
    again = upload_dataset_folder(
        folder, REPO, revision="v2", token="hf_write", endpoint=fake_hub.url
    )
    assert not again.committed


def test_public_upload_and_token_from_env(
    tmp_path: Path, fake_hub: FakeHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_write")
    build_folder(tmp_path / "out" / EXPORT_SUBDIR, n_rows=2, shard_rows=5)
    result = push_export_to_hub(tmp_path / "out", REPO, private=False, endpoint=fake_hub.url)
    assert not result.private
    assert fake_hub.repos[REPO].private is False
    assert fake_hub.files(REPO) == _local_files(tmp_path / "out" / EXPORT_SUBDIR)


def test_missing_token_is_refused_before_any_request(tmp_path: Path, fake_hub: FakeHub) -> None:
    build_folder(tmp_path, n_rows=2, shard_rows=5)
    with pytest.raises(ContagentError, match="no Hugging Face token: set HF_TOKEN") as err:
        upload_dataset_folder(tmp_path, REPO, endpoint=fake_hub.url)
    assert "\n" not in str(err.value)
    assert fake_hub.requests == []


@pytest.mark.parametrize(
    ("token", "repo", "expected"),
    [
        (
            "hf_bogus",
            REPO,
            r"refused the token: HTTP 401 \(the token was rejected\): Invalid user token",
        ),
        ("hf_read", REPO, "read-only"),
        (
            "hf_write",
            "someone-else/data",
            r"refused creating dataset repo someone-else/data: HTTP 403 \(the token may not write there\)",
        ),
    ],
)
def test_refused_token_or_repo_moves_no_data(
    tmp_path: Path, fake_hub: FakeHub, token: str, repo: str, expected: str
) -> None:
    build_folder(tmp_path, n_rows=2, shard_rows=5)
    with pytest.raises(ContagentError, match=expected) as err:
        upload_dataset_folder(tmp_path, repo, token=token, endpoint=fake_hub.url)
    assert "\n" not in str(err.value)
    assert fake_hub.commits == [] and fake_hub.lfs_puts == []
    assert not any("preupload" in path or "lfs" in path for _, path in fake_hub.requests)


def test_private_upload_into_public_repo_is_refused(tmp_path: Path, fake_hub: FakeHub) -> None:
    build_folder(tmp_path, n_rows=2, shard_rows=5)
    upload_dataset_folder(tmp_path, REPO, private=False, token="hf_write", endpoint=fake_hub.url)
    with pytest.raises(ContagentError, match="already exists and is public; pass --public"):
        upload_dataset_folder(tmp_path, REPO, token="hf_write", endpoint=fake_hub.url)
    assert len(fake_hub.commits) == 1


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        ("no-card", "no README.md dataset card"),
        ("no-shards", "no train-NNNNN-of-NNNNN.parquet shards"),
        ("mixed", "shards from different exports are mixed"),
        ("missing", "no such dataset folder"),
    ],
)
def test_bad_folder_is_refused_before_any_request(
    tmp_path: Path, fake_hub: FakeHub, breakage: str, expected: str
) -> None:
    folder = tmp_path / "prime-sft"
    build_folder(folder, n_rows=5, shard_rows=2)
    if breakage == "no-card":
        (folder / "README.md").unlink()
    elif breakage == "no-shards":
        for shard in (folder / "data").iterdir():
            shard.unlink()
    elif breakage == "mixed":
        shard = folder / "data/train-00000-of-00003.parquet"
        shard.rename(folder / "data/train-00000-of-00004.parquet")
    else:
        folder = tmp_path / "nowhere"
    with pytest.raises(ContagentError, match=expected):
        upload_dataset_folder(folder, REPO, token="hf_write", endpoint=fake_hub.url)
    assert fake_hub.requests == []


def test_bad_repo_id_and_unreachable_hub(tmp_path: Path, hub_env: None) -> None:
    build_folder(tmp_path, n_rows=1, shard_rows=5)
    with pytest.raises(ContagentError, match="bad repo id"):
        upload_dataset_folder(
            tmp_path, "acme/../x", token="hf_write", endpoint="http://127.0.0.1:9"
        )
    with pytest.raises(
        ContagentError, match=r"cannot reach the Hugging Face Hub at http://127.0.0.1:9"
    ):
        upload_dataset_folder(tmp_path, REPO, token="hf_write", endpoint="http://127.0.0.1:9")


def test_existing_repo_without_write_access_is_refused_before_lfs(
    tmp_path: Path, fake_hub: FakeHub
) -> None:
    from fake_hub import Repo

    fake_hub.repos["other/data"] = Repo("other/data", private=False)
    build_folder(tmp_path, n_rows=2, shard_rows=5)
    with pytest.raises(ContagentError, match="already exists and is public"):
        upload_dataset_folder(tmp_path, "other/data", token="hf_write", endpoint=fake_hub.url)
    with pytest.raises(
        ContagentError,
        match=r"refused the commit to other/data: HTTP 403 \(the token may not write",
    ):
        upload_dataset_folder(
            tmp_path, "other/data", private=False, token="hf_write", endpoint=fake_hub.url
        )
    assert fake_hub.commits == [] and fake_hub.lfs_puts == []
    assert fake_hub.files("other/data") == {}


def test_the_trl_folder_of_an_export_uploads_like_prime_sft(
    samples: Path, tmp_path: Path, fake_hub: FakeHub
) -> None:
    from contagent.export.exporter import ExportOptions, export

    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all", formats=("prime-sft", "trl")))
    result = push_export_to_hub(out, REPO, "trl", token="hf_write", endpoint=fake_hub.url)
    assert result.committed
    assert fake_hub.files(REPO) == _local_files(out / "trl")
    assert "README.md" in result.files_uploaded
