"""How a Ray rollout's files reach --log-dir: whole (every digest checked) or not at all.

These run without Ray and without Docker: packing, checking and moving files in
are plain functions of ``contagent.runner.executors.transfer``.
"""

from __future__ import annotations

import io
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from contagent.errors import ContagentError
from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.runner.config import FINISHED_STATUSES, LlmOptions, RunConfig
from contagent.runner.executors.transfer import Shipment, land, pack, record_failure
from contagent.runner.lifecycle.rollout import RolloutPlan
from contagent.runner.tasks.experiment import load_experiment
from tests.helpers import REPO

EXCHANGES = b'{"type":"request","index":0}\n{"type":"outcome","index":0}\n'


def _node_files(root: Path, name: str = "exp_001") -> RunPaths:
    """What a node's scratch folder holds after one rollout."""
    paths = RunPaths(root)
    paths.rollout(name).root.mkdir(parents=True)
    paths.rollout(name).exchanges.write_bytes(EXCHANGES)
    paths.rollout(name).result.write_text(
        RolloutResult(rollout_id=name, status="passed", node="n1/abc").model_dump_json()
    )
    paths.log(name).write_text('{"id": 1}\n')
    paths.result_text(name).write_text("== verdict: passed ==\n")
    paths.err(name).write_bytes(b"")
    return paths


def _retar(archive: bytes, change: dict[str, bytes | None]) -> bytes:
    """``archive`` with the named members' contents replaced (None: left out)."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(archive)) as src,
        tarfile.open(fileobj=out, mode="w") as dst,
    ):
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None  # type: ignore[union-attr]
            if member.name in change:
                data = change[member.name]
                if data is None:
                    continue
                member.size = len(data)
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    return out.getvalue()


def test_a_shipment_lands_whole(tmp_path: Path) -> None:
    shipment = pack(_node_files(tmp_path / "node"), "exp_001", "n1/abc")
    assert set(shipment.sha256) == {
        "exp_001.log",
        "exp_001.result",
        "exp_001.err",
        "rollouts/exp_001/exchanges.jsonl",
        "rollouts/exp_001/result.json",
    }
    paths = RunPaths(tmp_path / "logs")
    result = land(paths, "exp_001", shipment)
    assert result.status == "passed" and result.node == "n1/abc"
    assert paths.rollout("exp_001").exchanges.read_bytes() == EXCHANGES
    assert paths.result_text("exp_001").read_text() == "== verdict: passed ==\n"
    assert not paths.incoming_dir.exists() and not paths.superseded_dir.exists()


@pytest.mark.parametrize(
    "change",
    [
        {"rollouts/exp_001/exchanges.jsonl": EXCHANGES[:-10]},  # a recorded exchange cut short
        {"rollouts/exp_001/exchanges.jsonl": None},  # the raw log left out
        {"exp_001.log": b"other"},
    ],
)
def test_a_shipment_that_is_not_whole_is_refused_and_kept_aside(
    tmp_path: Path, change: dict[str, bytes | None]
) -> None:
    shipment = pack(_node_files(tmp_path / "node"), "exp_001", "n1/abc")
    bad = replace(shipment, archive=_retar(shipment.archive, change))
    paths = RunPaths(tmp_path / "logs")
    with pytest.raises(ContagentError, match="differ from what node n1/abc sent"):
        land(paths, "exp_001", bad)
    assert not paths.rollout("exp_001").root.exists()
    assert not paths.log("exp_001").exists()
    [aside] = paths.superseded_dir.iterdir()
    assert (aside / "rollouts" / "exp_001" / "result.json").is_file()


def test_an_extra_file_is_refused(tmp_path: Path) -> None:
    shipment = pack(_node_files(tmp_path / "node"), "exp_001", "n1/abc")
    sums = {k: v for k, v in shipment.sha256.items() if k != "exp_001.err"}
    with pytest.raises(ContagentError, match=r"first exp_001\.err"):
        land(RunPaths(tmp_path / "logs"), "exp_001", Shipment("n1/abc", shipment.archive, sums))


def test_pack_refuses_a_rollout_without_result(tmp_path: Path) -> None:
    paths = _node_files(tmp_path / "node")
    paths.rollout("exp_001").result.unlink()
    with pytest.raises(ContagentError, match=r"no result\.json"):
        pack(paths, "exp_001", "n1/abc")


def test_a_task_failed_for_good_is_an_infra_error_that_resume_reruns(tmp_path: Path) -> None:
    config = RunConfig(
        experiments_dir=REPO / "experiments",
        log_dir=tmp_path / "logs",
        upstream_url="http://127.0.0.1:9",
        llm=LlmOptions(served_model_name="m"),
    )
    plan = RolloutPlan(load_experiment(REPO / "experiments" / "exp_001", REPO / "skills"), 1)
    paths = RunPaths(tmp_path / "logs")
    result = record_failure(paths, config, plan, "NodeDiedError: node lost", 0.0)
    on_disk = RolloutResult.model_validate_json(paths.rollout("exp_001_r1").result.read_bytes())
    assert on_disk == result
    assert result.status == "infra_error" and result.error == "NodeDiedError: node lost"
    assert result.status not in FINISHED_STATUSES
    assert "NodeDiedError" in paths.result_text("exp_001_r1").read_text()
