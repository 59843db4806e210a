"""The selection rules, as pure functions: no IO, no logging, no state.

The exporter uses them to build rows and the validator uses them to check
rows; the proxy uses :func:`completeness` to label outcomes. Keep every rule
here so that the three can never disagree.
"""

from __future__ import annotations

from typing import Any

#: finish reasons that mean the model ended its turn on its own.
COMPLETE_FINISH_REASONS = frozenset({"stop", "tool_calls", "function_call"})


def completeness(status: int | None, response: Any) -> tuple[bool, str | None]:
    """Rule 1: is a response complete?  Returns ``(completed, why_not)``.

    Complete means HTTP 200, a parseable body, a Responses-API ``status`` absent
    or ``completed``, no ``incomplete_details``, and every chat choice's
    ``finish_reason`` in stop/tool_calls/function_call. Echoed request settings
    such as ``truncation: "disabled"`` are settings, not truncation.
    """
    if status != 200:
        return False, f"http status {status}"
    if not isinstance(response, dict):
        return False, "response body is not a JSON object"
    resp_status = response.get("status")
    if resp_status is not None and resp_status != "completed":
        return False, f"response status {resp_status!r}"
    if response.get("incomplete_details"):
        return False, "incomplete_details present"
    choices = response.get("choices")
    if choices is not None:
        if not isinstance(choices, list) or not choices:
            return False, "no choices"
        for choice in choices:
            reason = choice.get("finish_reason") if isinstance(choice, dict) else None
            if reason not in COMPLETE_FINISH_REASONS:
                return False, f"finish_reason {reason!r}"
    elif response.get("object") != "response" and "output" not in response:
        if "data" in response:  # e.g. /v1/models: complete, but not a generation
            return True, None
        return False, "neither choices nor output in response"
    return True, None
