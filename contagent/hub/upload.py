"""Publish a dataset folder to the Hugging Face Hub in one commit.

Order matters: the folder is checked, the token found, the token and the repo
accepted by the Hub, and only then does data move. Files already on the Hub with
the same content are left out of the commit, and train shards on the Hub that the
folder no longer has are deleted in the same commit, so the repo always holds
exactly the folder's shard set.
"""

from __future__ import annotations

import fnmatch
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypedDict

from huggingface_hub import (
    CommitOperationAdd,
    CommitOperationDelete,
    HfApi,
    RepoFile,
    get_token,
)
from huggingface_hub.errors import HfHubHTTPError, HFValidationError
from huggingface_hub.utils import validate_repo_id
from huggingface_hub.utils.sha import git_hash, sha_fileobj
from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import Unpack

from contagent import __version__
from contagent.errors import ContagentError
from contagent.export.formats.folder import DatasetFolder, read_dataset_folder
from contagent.layout import DatasetFolderPaths, ExportPaths

log = logging.getLogger(__name__)

REPO_TYPE = "dataset"


class UploadResult(BaseModel):
    """What one upload did."""

    model_config = ConfigDict(extra="forbid")

    repo_id: str = Field(description="The dataset repo, ORG/NAME.")
    repo_url: str = Field(description="Web address of the dataset repo.")
    revision: str = Field(description="Branch the files were committed to.")
    private: bool = Field(description="Whether the repo is private.")
    committed: bool = Field(description="False when the Hub already held exactly these files.")
    commit_oid: str = Field(description="The new commit, or the branch head when nothing changed.")
    commit_url: str | None = Field(None, description="Web address of the new commit, if any.")
    files_uploaded: list[str] = Field(default_factory=list, description="Paths added or changed.")
    files_skipped: list[str] = Field(
        default_factory=list, description="Paths already on the Hub with the same content."
    )
    files_deleted: list[str] = Field(
        default_factory=list, description="Stale train shards removed from the repo."
    )


def resolve_token(token: str | None) -> str:
    """The token to use: the argument, else ``HF_TOKEN``, else the saved login."""
    if token:
        return token
    try:
        found = get_token()
    except Exception as exc:  # an OIDC exchange or a token file can fail in many ways
        raise ContagentError(f"cannot read the Hugging Face token: {exc}") from exc
    if not found:
        raise ContagentError("no Hugging Face token: set HF_TOKEN or log in with `hf auth login`")
    return found


@contextmanager
def _hub_step(what: str, endpoint: str) -> Iterator[None]:
    """Turn an HTTP refusal or a network failure during ``what`` into a one-line error."""
    try:
        yield
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else 0
        detail = (exc.server_message or str(exc)).strip().splitlines()[0]
        hint = {401: " (the token was rejected)", 403: " (the token may not write there)"}
        raise ContagentError(
            f"the Hugging Face Hub refused {what}: HTTP {status}{hint.get(status, '')}: {detail}"
        ) from exc
    except (OSError, ValueError) as exc:
        raise ContagentError(f"{what} failed: {exc}") from exc
    except Exception as exc:
        # httpx transport errors (connection refused, timeouts) reach us unwrapped.
        if type(exc).__module__.split(".")[0] in {"httpx", "httpx2", "httpcore", "httpcore2"}:
            raise ContagentError(
                f"cannot reach the Hugging Face Hub at {endpoint} ({what}): {exc}"
            ) from exc
        raise


def _local_matches(path: Path, remote: RepoFile) -> bool:
    """Whether ``remote`` holds the same bytes as ``path`` (LFS by sha256, else git blob id)."""
    if remote.size != path.stat().st_size:
        return False
    if remote.lfs is not None:
        with path.open("rb") as f:
            return sha_fileobj(f).hex() == remote.lfs.sha256
    # Regular (non-LFS) files on the Hub are small: the card, never a shard.
    return git_hash(path.read_bytes()) == remote.blob_id


def _plan(
    local: DatasetFolder, remote: dict[str, RepoFile]
) -> tuple[list[CommitOperationAdd | CommitOperationDelete], list[str], list[str], list[str]]:
    ops: list[CommitOperationAdd | CommitOperationDelete] = []
    uploaded: list[str] = []
    skipped: list[str] = []
    wanted = {local.relative(p): p for p in (*local.shards, *local.images, local.card)}
    for rel, path in wanted.items():
        if rel in remote and _local_matches(path, remote[rel]):
            skipped.append(rel)
        else:
            ops.append(CommitOperationAdd(path_in_repo=rel, path_or_fileobj=path))
            uploaded.append(rel)
    # Anything the card's data_files glob would load but the folder lacks is stale.
    deleted = sorted(
        p for p in remote if fnmatch.fnmatch(p, DatasetFolderPaths.SHARD_GLOB) and p not in wanted
    )
    ops += [CommitOperationDelete(path_in_repo=p) for p in deleted]
    return ops, uploaded, skipped, deleted


def _repo_ready(api: HfApi, repo_id: str, private: bool, branch: str) -> tuple[str, bool]:
    """The repo's URL and visibility once it and ``branch`` exist; raises
    :class:`ContagentError` for a read-only token or a private upload into a public repo."""
    with _hub_step("the token", api.endpoint):
        who = api.whoami()
    role = who.get("auth", {}).get("accessToken", {}).get("role")
    if role == "read":
        raise ContagentError(f"the Hugging Face token is read-only; it cannot upload to {repo_id}")

    with _hub_step(f"creating dataset repo {repo_id}", api.endpoint):
        repo_url = api.create_repo(repo_id, repo_type=REPO_TYPE, private=private, exist_ok=True)
    with _hub_step(f"reading dataset repo {repo_id}", api.endpoint):
        is_private = bool(api.dataset_info(repo_id).private)
    if private and not is_private:
        raise ContagentError(
            f"{repo_id} already exists and is public; pass --public to upload to it anyway"
        )
    if branch != "main":
        with _hub_step(f"creating branch {branch!r} in {repo_id}", api.endpoint):
            api.create_branch(repo_id, repo_type=REPO_TYPE, branch=branch, exist_ok=True)
    return str(repo_url), is_private


def _remote_files(api: HfApi, repo_id: str, branch: str) -> dict[str, RepoFile]:
    """The files of the repo at ``branch``, by path."""
    with _hub_step(f"listing files of {repo_id}", api.endpoint):
        return {
            f.path: f
            for f in api.list_repo_tree(
                repo_id, repo_type=REPO_TYPE, revision=branch, recursive=True
            )
            if isinstance(f, RepoFile)
        }


def upload_dataset_folder(
    folder: Path,
    repo_id: str,
    private: bool = True,
    revision: str | None = None,
    message: str | None = None,
    token: str | None = None,
    endpoint: str | None = None,
) -> UploadResult:
    """Create the dataset repo if needed and commit the folder's card and shards to it.

    ``endpoint`` defaults to ``HF_ENDPOINT`` or the public Hub (for a private Hub, set
    ``HF_ENDPOINT``: ``huggingface_hub`` trusts only that host's URLs). Raises
    :class:`ContagentError` for a bad folder, a missing or rejected token, a refused
    repo, or a private upload into an existing public repo, all before data moves.
    """
    local = read_dataset_folder(Path(folder))
    try:
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise ContagentError(f"bad repo id {repo_id!r}: {str(exc).splitlines()[0]}") from exc
    api = HfApi(endpoint=endpoint, token=resolve_token(token))
    branch = revision or "main"

    repo_url, is_private = _repo_ready(api, repo_id, private, branch)
    remote = _remote_files(api, repo_id, branch)
    ops, uploaded, skipped, deleted = _plan(local, remote)
    result = UploadResult(
        repo_id=repo_id,
        repo_url=repo_url,
        revision=branch,
        private=is_private,
        committed=bool(ops),
        commit_oid="",
        commit_url=None,
        files_uploaded=uploaded,
        files_skipped=skipped,
        files_deleted=deleted,
    )
    if not ops:
        with _hub_step(f"reading dataset repo {repo_id}", api.endpoint):
            result.commit_oid = api.dataset_info(repo_id, revision=branch).sha or ""
        log.info("%s@%s already holds %s", repo_id, branch, local.root)
        return result

    summary = message or (
        f"Upload {len(local.shards)} shard(s) and dataset card with contagent {__version__}"
    )
    with _hub_step(f"the commit to {repo_id}", api.endpoint):
        info = api.create_commit(
            repo_id, ops, commit_message=summary, repo_type=REPO_TYPE, revision=branch
        )
    result.commit_oid = info.oid
    result.commit_url = info.commit_url
    return result


class UploadOptions(TypedDict, total=False):
    """The keyword options of :func:`upload_dataset_folder`, for callers that pass them on."""

    private: bool
    revision: str | None
    message: str | None
    token: str | None
    endpoint: str | None


def push_export_to_hub(
    out_dir: Path, repo_id: str, format_name: str = "prime-sft", **options: Unpack[UploadOptions]
) -> UploadResult:
    """Upload the ``format_name`` dataset folder of the export in ``out_dir`` (``OUT/<format>/``)."""
    return upload_dataset_folder(
        ExportPaths(out_dir).format_folder(format_name).root, repo_id, **options
    )
