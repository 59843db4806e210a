"""Helpers shared by the viewer tests (fixtures stay in conftest.py)."""

from __future__ import annotations

from pathlib import Path

from contagent._loopthread import InThread
from contagent.viewer.app import Viewer
from tools.rollouts import RolloutBuilder, assistant, call
from tools.samples import PASSED, TASK

SCRIPT = "<script>window.__xss = 1</script>"
XSS_ID = "xss_probe"


def xss_rollout(root: Path, rollout_id: str = XSS_ID) -> Path:
    """A rollout whose tool output, reasoning and experiment name carry markup."""
    b = RolloutBuilder(rollout_id, TASK)
    c1 = call("call_1", "terminal", command="cat notes.html")
    b.step(assistant("Reading <b>notes</b>.", c1, reasoning=f"think {SCRIPT}"))
    b.tool_output("call_1", "terminal", f"{SCRIPT}\n<img src=x onerror=window.__xss=2>")
    b.step(assistant(None, call("call_2", "finish", message="done")))
    return b.write(root, {**PASSED, "experiment": f"exp_{SCRIPT}"}).root


def serve(path: Path) -> InThread[Viewer]:
    return InThread(Viewer(path, "127.0.0.1", 0), "viewer")
