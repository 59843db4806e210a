"""Policy versions of token samples: which weights sampled each token (pure functions).

A rollout engine's proxy stamps each request record with the policy version
current when the request went upstream and each outcome record with the version
current when the exchange ended. A chat, Messages or Responses answer carries no
version of its own, so a step's tokens count as sampled under the version its
request went up with: the older one when the step spans an update (the sample
then says so). A log recorded without versions gives samples without them.
"""

from __future__ import annotations

from typing import Any

from contagent.rules.history import Problem

#: A step's (version when its request went upstream, version when it ended); both None
#: when the log records no versions.
StepVersions = tuple[int | None, int | None]


def _version(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def step_versions(
    request: dict[str, Any], outcome: dict[str, Any], where: str
) -> StepVersions | Problem:
    """A step's policy versions from its records, or why they cannot be trusted (one
    record stamped and the other not, a value that is no version, an end before the start)."""
    start, end = request.get("policy_version"), outcome.get("policy_version")
    if not (_version(start) and _version(end)):
        return ("bad_tokens", f"{where}: policy_version {start!r} -> {end!r} is not a version")
    if (start is None) != (end is None):
        return ("bad_tokens", f"{where}: only one of its records carries a policy_version")
    if start is not None and end is not None and end < start:
        return ("bad_tokens", f"{where}: policy_version went back from {start} to {end}")
    return start, end


def token_versions(
    steps: list[tuple[int, int, StepVersions]], n: int
) -> tuple[list[int] | None, bool | None]:
    """(the version of each of ``n`` tokens, whether a step spans an update) for a sample
    whose steps add the tokens ``[start, end)`` each; (None, None) unless every step has
    versions."""
    if not steps or any(v[0] is None for _, _, v in steps):
        return None, None
    versions = [0] * n
    spans = False
    for start, end, (first, last) in steps:
        assert first is not None
        versions[start:end] = [first] * (end - start)
        spans = spans or last != first
    return versions, spans
