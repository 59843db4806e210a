"""mini-swe-agent (PyPI ``mini-swe-agent``): one bash tool, chat completions through LiteLLM.

Its trajectory is one JSON document written at the end; :meth:`report`
converts it to one JSON object a line (a header line, then each message).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from contagent.agents._util import LOG_LIMIT_BYTES, inside_program, read_json
from contagent.agents.base import DUMMY_KEY, AgentReport, AgentSettings, Api, Launch
from contagent.agents.layer import venv_layer


def model_kwargs(s: AgentSettings) -> dict[str, Any]:
    """LiteLLM ``completion`` arguments, each set deliberately.

    mini.yaml's ``drop_params: true`` would silently drop what the server does
    not declare; it is off, so what the user asked for is sent. LiteLLM's own
    retries are off: mini-swe-agent's retry loop is given ``num_retries``.
    """
    kwargs: dict[str, Any] = {
        "api_base": s.base_url,
        "api_key": DUMMY_KEY,
        "timeout": s.timeout_s,
        "max_retries": 0,
        "drop_params": False,
    }
    for key in ("temperature", "top_p", "reasoning_effort"):
        value = getattr(s, key)
        if value is not None:
            kwargs[key] = value
    if s.max_output_tokens is not None:
        kwargs["max_tokens"] = s.max_output_tokens
    if s.extra_body:
        kwargs["extra_body"] = dict(s.extra_body)
    return kwargs


@dataclass(frozen=True)
class MiniSweAgent:
    name: str = "mini-swe-agent"
    api: Api = "chat"
    image: str = "contagent-runner-mini-swe-agent:latest"
    dockerfile: str = "agents/mini-swe-agent.Dockerfile"
    honours: frozenset[str] = frozenset(
        {
            "max_iterations",
            "temperature",
            "top_p",
            "reasoning_effort",
            "max_output_tokens",
            "extra_body",
        }
    )

    def model_string(self, served_model_name: str) -> str:
        return f"openai/{served_model_name}"  # LiteLLM's provider prefix, stripped on the wire

    def launch(self, settings: AgentSettings) -> Launch:
        cfg = {
            "model": self.model_string(settings.served_model_name),
            "model_kwargs": model_kwargs(settings),
            "num_retries": settings.num_retries,
            "task": settings.task,
            "workspace": settings.workspace,
            "max_iterations": settings.max_iterations,
            "out_dir": settings.out_dir,
        }
        return inside_program("mini_main.py", "mini.json", cfg, env={})

    def report(self, out_dir: Path) -> AgentReport:
        data = read_json(out_dir / "mini-report.json")
        return AgentReport(
            version=data.get("version"),
            stop_condition=data.get("stop_condition"),
            iterations=data.get("iterations"),
            skills_loaded=[],
            error=data.get("error"),
            events=trajectory_lines(out_dir / "mini.traj.json"),
        )


def trajectory_lines(path: Path) -> list[bytes]:
    """The trajectory document as JSON lines: ``{"info": ...}``, then one line per message."""
    try:
        if path.stat().st_size > LOG_LIMIT_BYTES:
            return [orjson.dumps({"unparsed": f"trajectory over {LOG_LIMIT_BYTES} bytes"})]
        doc = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return []
    except (OSError, orjson.JSONDecodeError) as exc:
        return [orjson.dumps({"unparsed": f"trajectory unreadable: {exc}"})]
    if not isinstance(doc, dict):
        return [orjson.dumps({"unparsed": "trajectory is not a JSON object"})]
    head = {k: v for k, v in doc.items() if k != "messages"}
    lines = [orjson.dumps(head)]
    messages = doc.get("messages")
    for message in messages if isinstance(messages, list) else []:
        lines.append(orjson.dumps(message if isinstance(message, dict) else {"message": message}))
    return lines


AGENT = MiniSweAgent()

#: On a task image: the runner image's /opt/venv, which needs its Python 3.13.
LAYER = venv_layer("python3.13", "minisweagent")
