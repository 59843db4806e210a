"""OpenHands headless, in-process: runs *inside* the runner container (the image's venv).

Self-contained (no ``contagent`` import): the only place that imports the
OpenHands SDK; the host never does. Reads ``openhands.json`` (written by
:mod:`contagent.agents.openhands`), writes every event to ``events.jsonl`` and
what the host needs to know to ``openhands-report.json`` in the out folder.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from importlib.metadata import version
from pathlib import Path
from typing import Any


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def run(cfg: dict[str, Any], out: Path, report: dict[str, Any]) -> None:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
    from openhands.sdk import LLM, Agent, AgentContext, Conversation, Tool
    from openhands.sdk.skills import load_skills_from_dir
    from openhands.tools.file_editor import FileEditorTool
    from openhands.tools.task_tracker import TaskTrackerTool
    from openhands.tools.terminal import TerminalTool
    from pydantic import SecretStr

    report["version"] = version("openhands-sdk")
    llm = LLM(api_key=SecretStr(cfg["api_key"]), **cfg["llm"])

    skills: list[Any] = []
    skills_dir = Path(cfg["skills_dir"])
    if cfg.get("skills") and skills_dir.is_dir():
        repo, knowledge, agent_skills = load_skills_from_dir(skills_dir)
        for group in (repo, knowledge, agent_skills):
            skills.extend(group.values())
    report["skills_loaded"] = sorted(getattr(s, "name", "?") for s in skills)

    agent = Agent(
        llm=llm,
        tools=[
            Tool(name=TerminalTool.name),
            Tool(name=FileEditorTool.name),
            Tool(name=TaskTrackerTool.name),
        ],
        agent_context=AgentContext(skills=skills),
    )

    counts = {"actions": 0, "messages": 0}
    last = {"tool": ""}
    events_log = (out / "events.jsonl").open("a", encoding="utf-8")

    def on_event(event: Any) -> None:
        events_log.write(event.model_dump_json() + "\n")
        events_log.flush()
        kind = type(event).__name__
        if getattr(event, "source", None) == "agent" and kind in ("ActionEvent", "MessageEvent"):
            last["tool"] = getattr(event, "tool_name", "") or ""
            counts["actions" if kind == "ActionEvent" else "messages"] += 1
            report["iterations"] = counts["actions"] + counts["messages"]
        if kind == "ConversationErrorEvent":
            report["error_code"] = getattr(event, "code", None)

    conversation = Conversation(
        agent=agent,
        workspace=cfg["workspace"],
        persistence_dir=str(out / "conversation"),
        max_iteration_per_run=int(cfg["max_iterations"]),
        callbacks=[on_event],
        visualizer=None,
        delete_on_close=False,
    )
    try:
        conversation.send_message(cfg["task"])
        conversation.run()
    finally:
        events_log.close()
    state = conversation.state.execution_status
    status = str(getattr(state, "value", state))
    if report.get("error_code") == "MaxIterationsReached":
        stop = "max_iterations"
    elif status == "finished":
        stop = "finished" if last["tool"] == "finish" else "text_reply"
    else:
        stop = status
    report["stop_condition"] = stop
    report["iterations"] = counts["actions"] + counts["messages"]


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[1]).read_text())
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    code = 0
    try:
        run(cfg, out, report)
    except Exception as exc:  # the agent's failure is data, reported to the host
        report["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        traceback.print_exc(file=sys.stderr)
        code = 1
    _write_json(out / "openhands-report.json", report)
    return code


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    # Everything is on disk; skip the SDK's slow interpreter shutdown (its threads, tmux
    # clean-up and atexit hooks took about 2 s per rollout), the process ends here anyway.
    os._exit(code)
