"""``reward.json``: the reward of a rollout recorded by ``contagent proxy`` alone.

A harness posts it to the proxy's control route (:mod:`contagent.proxy.reward_route`) or
writes it with ``contagent reward DIR``; either way it lands in the rollout's folder beside
its raw log, written atomically, a later one replacing an earlier one. A rollout of
``contagent run`` has its reward in ``result.json`` instead and never gets this file.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from contagent.errors import ContagentError
from contagent.layout import RolloutPaths, safe_segment
from contagent.versions import read_optional, version_field, versioned_object

#: ``reward.json``'s version
REWARD_SCHEMA_VERSION = 1
REWARD_FILE = RolloutPaths(Path()).reward.name
#: the longest group name taken
MAX_GROUP_CHARS = 256


class RewardPost(BaseModel):
    """What a harness gives: the body of the control route, and ``contagent reward``'s
    options."""

    model_config = ConfigDict(extra="forbid", strict=True, defer_build=True)

    rollout_id: str = Field(description="The rollout the reward is for (its folder's name).")
    reward: float = Field(description="The rollout's reward, a finite number.")
    passed: bool | None = Field(None, description="Whether the attempt passed; null: not said.")
    group: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_GROUP_CHARS,
        description="The attempts this one is grouped with (the same task and model).",
    )

    @field_validator("reward", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("must be a number")
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        return float(value)

    @field_validator("rollout_id")
    @classmethod
    def _safe(cls, value: str) -> str:
        try:
            return safe_segment(value, "rollout id")
        except ContagentError as exc:
            raise ValueError(str(exc)) from None


class RewardRecord(RewardPost):
    """``<record-dir>/<rollout_id>/reward.json``."""

    schema_version: int = version_field(REWARD_SCHEMA_VERSION, "reward.json")


def parse_post(data: Any) -> RewardPost:
    """``data`` (parsed JSON) as a :class:`RewardPost`; raises :class:`ContagentError` with
    one line naming the first field that is wrong."""
    if not isinstance(data, dict):
        raise ContagentError("the body must be a JSON object")
    try:
        return RewardPost.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        kind = first["type"]
        if kind == "extra_forbidden":
            raise ContagentError(
                f"{where}: not a field (rollout_id, reward, passed, group)"
            ) from None
        if kind == "missing":
            raise ContagentError(f"{where}: missing") from None
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ContagentError(f"{where}: {message}") from None


def write_reward(rollout_dir: Path, post: RewardPost) -> RewardRecord:
    """Write ``post`` as ``rollout_dir``'s reward.json, atomically and durably (the file and
    its folder synced); raises :class:`ContagentError` when it cannot."""
    record = RewardRecord(**post.model_dump())
    path = rollout_dir / REWARD_FILE
    tmp = rollout_dir / f".{REWARD_FILE}.{os.getpid()}.tmp"
    data = orjson.dumps(record.model_dump(mode="json")) + b"\n"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        dirfd = os.open(rollout_dir, os.O_RDONLY)
        try:
            os.fsync(dirfd)
        finally:
            os.close(dirfd)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ContagentError(f"cannot write {path}: {exc.strerror or exc}") from None
    return record


def read_reward(rollout_dir: Path) -> RewardRecord | None:
    """``rollout_dir``'s reward.json, or None when there is none; raises
    :class:`ContagentError` for one that is malformed or from a newer contagent."""
    path = Path(rollout_dir) / REWARD_FILE
    raw = read_optional(path)
    if raw is None:
        return None
    value = versioned_object(raw, str(path), REWARD_SCHEMA_VERSION, default=None)
    body = {k: v for k, v in value.items() if k != "schema_version"}
    try:
        post = parse_post(body)
    except ContagentError as exc:
        raise ContagentError(f"{path}: {exc}") from None
    if post.rollout_id != Path(rollout_dir).name:
        raise ContagentError(
            f"{path}: rollout_id {post.rollout_id!r} is not its folder's {Path(rollout_dir).name!r}"
        )
    return RewardRecord(**post.model_dump(), schema_version=value["schema_version"])
