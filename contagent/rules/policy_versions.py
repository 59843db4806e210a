"""Policy versions of token samples: which weights sampled each token (pure functions).

A rollout engine's proxy stamps each request record with the policy version
current when the request went upstream and each outcome record with the version
current when the exchange ended. A chat, Messages or Responses answer carries no
version of its own, so a step's tokens count as sampled under the version its
request went up with. A step that ended under a newer version than it started with
ran across an update: the old weights, the new ones, or both (the new ones reading the
old ones' cache) sampled its tokens, and which is unknown, so its rollout gives no
samples (``bad_tokens``, naming the step). A log recorded without versions gives
samples without them.
"""

from __future__ import annotations

from typing import Any

from contagent.rules.history import Problem


def _version(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def step_version(
    request: dict[str, Any], outcome: dict[str, Any], where: str
) -> int | Problem | None:
    """A step's policy version from its records (None when the log records none), or why it
    cannot be trusted: one record stamped and the other not, a value that is no version, an
    end before the start, or after it (the step ran across an update)."""
    start, end = request.get("policy_version"), outcome.get("policy_version")
    if not (_version(start) and _version(end)):
        return ("bad_tokens", f"{where}: policy_version {start!r} -> {end!r} is not a version")
    if start is None or end is None:
        if start is end:
            return None
        return ("bad_tokens", f"{where}: only one of its records carries a policy_version")
    if end < start:
        return ("bad_tokens", f"{where}: policy_version went back from {start} to {end}")
    if end > start:
        return (
            "bad_tokens",
            f"{where}: ran across a policy update ({start} -> {end}), so which weights "
            "sampled its tokens is unknown",
        )
    return start


def token_versions(steps: list[tuple[int, int, int | None]], n: int) -> list[int] | None:
    """The version of each of ``n`` tokens of a sample whose steps add the tokens
    ``[start, end)`` each, under their step's version; None unless every step has one."""
    if not steps or any(version is None for _, _, version in steps):
        return None
    versions = [0] * n
    for start, end, version in steps:
        assert version is not None
        versions[start:end] = [version] * (end - start)
    return versions
