"""``--tokens auto`` on the proxy alone, when its upstream did not answer at start.

The decision is then taken at the first contact that succeeds: the first request that
arrives starts the server check (in a worker thread: it is blocking, with its own event
loop), and the requests that arrive meanwhile wait for it, in arrival order, before they are
recorded and forwarded with what was decided. A check the upstream does not answer either
leaves them to go up as they came (no token data), and the next request tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from contagent.proxy.identify import TokenPlan

log = logging.getLogger(__name__)

#: a request held for the decision: called once it is taken, whichever way
Resume = Callable[[], None]


class LatePlan:
    """The pending ``--tokens auto`` decision of one proxy."""

    def __init__(
        self,
        check: Callable[[], TokenPlan],
        apply: Callable[[TokenPlan], None],
        said: Callable[[str], None] | None = None,
    ) -> None:
        self._check = check
        self._apply = apply
        self._said = said
        self._held: list[Resume] = []
        self._task: asyncio.Future[Any] | None = None
        self.decided = False

    def hold(self, resume: Resume) -> None:
        """Run ``resume`` once the check ends (starting one when none runs)."""
        self._held.append(resume)
        if self._task is None:
            loop = asyncio.get_running_loop()
            self._task = loop.run_in_executor(None, self._check)
            self._task.add_done_callback(self._done)

    def _done(self, task: asyncio.Future[Any]) -> None:
        self._task = None
        plan: TokenPlan | None = None
        try:
            plan = task.result()
        except Exception as exc:  # a refused server (logits) says so, tokens stay off
            log.error("tokens: not recorded (%s)", exc)
            if self._said is not None:
                self._said(f"tokens: not recorded ({exc})")
            self.decided = True
        if plan is not None and not plan.unanswered:
            self._apply(plan)
            self.decided = True
            if self._said is not None:
                for line in (f"{plan.line}, at the first contact", *plan.details):
                    self._said(line)
        held, self._held = self._held, []
        for resume in held:
            resume()
