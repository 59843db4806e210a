"""The program that runs *inside* the runner container (the image's Python 3.12+).

``contagent run`` copies this file and a ``settings.json`` into ``/contagent``
and starts the container. It is self-contained (no ``contagent`` import) and is
the only place that imports the OpenHands SDK; the host never does.

Phases: ``setup.sh``, the OpenHands agent headless in-process, ``evaluate.sh``.
After each phase ``outcome.json`` is rewritten (temp + rename) so that a
rollout killed at its timeout still leaves what it had done.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def _run_script(script: Path, cwd: Path, log: Path) -> int:
    # no timeout here: the host kills the whole container at the rollout's timeout
    with log.open("wb") as out:
        return subprocess.run(
            ["bash", str(script)],
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        ).returncode


def _llm_kwargs(llm: dict[str, Any]) -> dict[str, Any]:
    """LLM settings set deliberately, so the wire carries what the user asked for.

    OpenHands defaults to ``reasoning_effort="high"``, five retries that re-send
    identical bodies, and drops sampling parameters for models it thinks reason;
    every one of those is set explicitly here.
    """
    kwargs: dict[str, Any] = {
        "model": llm["model"],
        "base_url": llm["base_url"],
        "num_retries": llm["num_retries"],
        "timeout": int(llm["timeout_s"]),
        "reasoning_effort": llm.get("reasoning_effort"),
        "litellm_extra_body": dict(llm.get("extra_body") or {}),
        "usage_id": "agent",
    }
    sampling = False
    for key in ("temperature", "top_p"):
        if llm.get(key) is not None:
            kwargs[key] = llm[key]
            sampling = True
    if llm.get("max_output_tokens") is not None:
        kwargs["max_output_tokens"] = llm["max_output_tokens"]
    if sampling:
        kwargs["capability_overrides"] = {"supports_sampling_params": True}
    return kwargs


def _run_agent(settings: dict[str, Any], out: Path, outcome: dict[str, Any]) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
    from importlib.metadata import version

    from openhands.sdk import LLM, Agent, AgentContext, Conversation, Tool
    from openhands.sdk.skills import load_skills_from_dir
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.task_tracker import TaskTrackerTool
    from openhands.tools.terminal import TerminalTool
    from pydantic import SecretStr

    outcome["openhands_version"] = version("openhands-sdk")
    llm_cfg = settings["llm"]
    llm = LLM(
        # the real key stays with the proxy on the host; the agent's is a placeholder
        api_key=SecretStr("contagent-proxy"),
        **_llm_kwargs(llm_cfg),
    )

    skills: list[Any] = []
    skills_dir = Path(settings["skills_dir"])
    if settings.get("skills") and skills_dir.is_dir():
        repo, knowledge, agent_skills = load_skills_from_dir(skills_dir)
        for group in (repo, knowledge, agent_skills):
            skills.extend(group.values())
    outcome["skills_loaded"] = sorted(getattr(s, "name", "?") for s in skills)

    agent = Agent(
        llm=llm,
        tools=[
            Tool(name=TerminalTool.name),
            Tool(name=FileEditorTool.name),
            Tool(name=TaskTrackerTool.name),
        ],
        agent_context=AgentContext(skills=skills),
    )

    counts = {"events": 0, "actions": 0, "messages": 0}
    last = {"kind": "", "tool": ""}
    events_log = (out / "events.jsonl").open("a", encoding="utf-8")

    def on_event(event: Any) -> None:
        events_log.write(event.model_dump_json() + "\n")
        events_log.flush()
        counts["events"] += 1
        kind = type(event).__name__
        if getattr(event, "source", None) == "agent" and kind in ("ActionEvent", "MessageEvent"):
            last["kind"] = kind
            last["tool"] = getattr(event, "tool_name", "") or ""
            counts["actions" if kind == "ActionEvent" else "messages"] += 1
            outcome["iterations"] = counts["actions"] + counts["messages"]
        if kind == "ConversationErrorEvent":
            outcome["error_code"] = getattr(event, "code", None)

    conversation = Conversation(
        agent=agent,
        workspace=str(settings["workspace"]),
        persistence_dir=str(out / "conversation"),
        max_iteration_per_run=int(llm_cfg["max_iterations"]),
        callbacks=[on_event],
        visualizer=None,
        delete_on_close=False,
    )
    try:
        conversation.send_message(settings["task"])
        conversation.run()
    finally:
        events_log.close()
    status = str(
        getattr(conversation.state.execution_status, "value", conversation.state.execution_status)
    )
    if outcome.get("error_code") == "MaxIterationsReached":
        stop = "max_iterations"
    elif status == "finished":
        stop = "finished" if last["tool"] == "finish" else "text_reply"
    else:
        stop = status
    outcome["stop_condition"] = stop
    outcome["iterations"] = counts["actions"] + counts["messages"]


def main(argv: list[str]) -> int:
    settings = json.loads(Path(argv[1]).read_text())
    out = Path(settings["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    workspace = Path(settings["workspace"])
    outcome: dict[str, Any] = {"exit_codes": {}, "timings": {}}
    outcome_path = out / "outcome.json"
    _write_json(outcome_path, outcome)

    def phase(name: str, run: Callable[[], int]) -> int:
        """Run one phase; its exit code and duration reach the host even if a later one hangs."""
        t0 = time.monotonic()
        rc = run()
        outcome["exit_codes"][name] = rc
        outcome["timings"][f"{name}_s"] = time.monotonic() - t0
        _write_json(outcome_path, outcome)
        return rc

    def script(name: str) -> Callable[[], int]:
        path = Path(settings[f"{name}_script"])
        return lambda: _run_script(path, workspace, out / f"{name}.log")

    def agent() -> int:
        try:
            _run_agent(settings, out, outcome)
            return 0
        except Exception as exc:  # the agent's failure is data, reported to the host
            outcome["agent_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
            traceback.print_exc(file=sys.stderr)
            return 1

    if phase("setup", script("setup")) != 0:
        return 0
    phase("agent", agent)
    phase("evaluate", script("evaluate"))
    return 0


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is on disk; skip the SDK's slow interpreter shutdown (its threads, tmux
    # clean-up and atexit hooks took about 2 s per rollout), the container ends here anyway.
    os._exit(code)
