"""Fail fast when the LLM server goes away mid-run.

A rollout whose agent stopped because the LLM server failed it, as the proxy
recorded it (``upstream_error``: unreachable, cut off, garbage; ``http_error``
with a server-side status: 5xx, 408, 429), is not the model's doing: it is an
``infra_error`` marked with :data:`LLM_SERVER_STOP`, and ``--resume`` re-runs it.

:class:`FailFast` is the rule the scheduling loop consults: after
``pause_after`` such rollouts in a row no new rollout starts until the server
passes the preflight check again; the run waits for that up to ``--wait-for-llm``
seconds, counted from the first failure of the streak, then stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from contagent.errors import ContagentError
from contagent.rawlog.result import RolloutResult
from contagent.rawlog.stream import iter_lines

#: ``stop_condition`` of a rollout the LLM server ended (its status is ``infra_error``)
LLM_SERVER_STOP = "llm_server"
#: HTTP statuses from the server that are the server's trouble, not the request's
SERVER_SIDE_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))
#: rollouts in a row ended by the LLM server before new rollouts are held back
PAUSE_AFTER = 2
#: verdicts that show the LLM server worked for that rollout
_VERDICTS = frozenset({"passed", "failed", "agent_error", "timeout"})


def server_failure(exchanges: Path) -> str | None:
    """Why the LLM server failed the rollout's last exchange, or None when it did not.

    ``exchanges`` is the raw log in either form.

    Only the last request counts: it is the one the agent stopped on. A request
    without an outcome, a completed answer or a 4xx (the request's own fault) is None.
    """
    last: dict[str, Any] | None = None
    last_request = -1
    try:
        for line in iter_lines(exchanges):
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a torn last line; the exporter reports it
            if not isinstance(rec, dict) or not isinstance(rec.get("index"), int):
                continue
            if rec.get("type") == "request":
                last_request = max(last_request, rec["index"])
            elif rec.get("type") == "outcome" and (last is None or rec["index"] >= last["index"]):
                last = rec
    except ContagentError:
        return None  # the exporter reports an unreadable log
    if last is None or last["index"] != last_request:
        return None
    status = last.get("status")
    server_side = last.get("outcome") == "upstream_error" or (
        last.get("outcome") == "http_error" and status in SERVER_SIDE_STATUSES
    )
    if not server_side:
        return None
    return f"the LLM server failed exchange {last['index']}: {last.get('error') or status}"


class FailFast:
    """Counts rollouts the LLM server ended in a row; says when to hold back and when to stop."""

    def __init__(
        self,
        wait_s: float,
        pause_after: int = PAUSE_AFTER,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.wait_s = wait_s
        self.pause_after = pause_after
        self._clock = clock
        self.streak = 0
        self._since: float | None = None
        self._checked_at = float("-inf")
        self.last_reason = ""

    def observe(self, result: RolloutResult) -> None:
        if result.stop_condition == LLM_SERVER_STOP:
            # a rollout started before the server last passed its check tells nothing new
            if (result.started or 0.0) < self._checked_at:
                return
            self.streak += 1
            self.last_reason = result.error or ""
            if self._since is None:
                self._since = self._clock()
        elif result.status in _VERDICTS:
            self.streak = 0
            self._since = None

    @property
    def paused(self) -> bool:
        return self.streak >= self.pause_after

    def recheck(self, wait: Callable[[float], object]) -> str | None:
        """While paused: wait for the server (``wait(seconds)`` raises when it is not
        back in time); the reason to stop the run, or None to go on."""
        since = self._since if self._since is not None else self._clock()
        left = max(0.0, since + self.wait_s - self._clock())
        head = f"{self.streak} rollouts in a row ended on the LLM server ({self.last_reason})"
        try:
            wait(left)
        except ContagentError as exc:
            return f"{head}; {exc}"
        if left <= 0:
            # it passes the check, yet rollouts kept failing on it all along
            return (
                f"{head} for more than --wait-for-llm {self.wait_s:g} s, though it lists the model"
            )
        self.streak = 0
        self._checked_at = self._clock()
        return None
