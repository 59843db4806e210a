"""OpenHands (the Software Agent SDK), headless and in-process in the runner container.

The in-container program is :mod:`contagent.agents.inside.openhands_main`;
this module turns the rollout's settings into the SDK's ``LLM`` arguments,
each one set deliberately, and reads back what the run left.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contagent.agents._util import inside_program, jsonl_objects, read_json
from contagent.agents.base import DUMMY_KEY, AgentReport, AgentSettings, Api, Launch
from contagent.agents.layer import venv_layer


def llm_kwargs(s: AgentSettings, model: str) -> dict[str, Any]:
    """LLM settings set deliberately, so the wire carries what the user asked for.

    OpenHands defaults to ``reasoning_effort="high"``, five retries that re-send
    identical bodies, and drops sampling parameters for models it thinks reason;
    every one of those is set explicitly here.
    """
    kwargs: dict[str, Any] = {
        "model": model,
        "base_url": s.base_url,
        "num_retries": s.num_retries,
        "timeout": int(s.timeout_s),
        "reasoning_effort": s.reasoning_effort,
        "litellm_extra_body": dict(s.extra_body),
        "usage_id": "agent",
    }
    sampling = False
    for key in ("temperature", "top_p"):
        value = getattr(s, key)
        if value is not None:
            kwargs[key] = value
            sampling = True
    if s.max_output_tokens is not None:
        kwargs["max_output_tokens"] = s.max_output_tokens
    if sampling:
        kwargs["capability_overrides"] = {"supports_sampling_params": True}
    return kwargs


@dataclass(frozen=True)
class OpenHands:
    name: str = "openhands"
    api: Api = "chat"
    image: str = "contagent-runner:latest"
    dockerfile: str = "Dockerfile"
    honours: frozenset[str] = frozenset(
        {
            "skills",
            "max_iterations",
            "temperature",
            "top_p",
            "reasoning_effort",
            "max_output_tokens",
            "extra_body",
        }
    )

    def model_string(self, served_model_name: str) -> str:
        # The provider prefix is required for OpenHands to send anything; it is stripped on the wire.
        return f"openai/{served_model_name}"

    def launch(self, settings: AgentSettings) -> Launch:
        cfg = {
            "llm": llm_kwargs(settings, self.model_string(settings.served_model_name)),
            "api_key": DUMMY_KEY,
            "task": settings.task,
            "workspace": settings.workspace,
            "skills_dir": settings.skills_dir,
            "skills": list(settings.skills),
            "max_iterations": settings.max_iterations,
            "out_dir": settings.out_dir,
        }
        # SDK logs as one JSON object a line in <name>.err, not rich-wrapped text.
        env = {"LOG_JSON": "1", "LOG_RICH_TRACEBACKS": "false"}
        return inside_program("openhands_main.py", "openhands.json", cfg, env)

    def report(self, out_dir: Path) -> AgentReport:
        data = read_json(out_dir / "openhands-report.json")
        return AgentReport(
            version=data.get("version"),
            stop_condition=data.get("stop_condition"),
            iterations=data.get("iterations"),
            skills_loaded=data.get("skills_loaded"),
            error=data.get("error"),
            events=jsonl_objects(out_dir / "events.jsonl"),
        )


AGENT = OpenHands()

#: On a task image: the runner image's /opt/venv, which needs its Python 3.13.
LAYER = venv_layer("python3.13", "openhands.sdk")
