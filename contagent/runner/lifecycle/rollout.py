"""What every kind of rollout shares: its plan, the run's context, the agent's settings,
its recording proxy, its token totals and how its files are written.

The agent's only route to the LLM is the recording proxy: the rollout network is
an internal bridge (no forwarding to anywhere outside it), and the proxy listens
on that bridge's gateway address on the host, forwarding to the user's server.
The lifecycle (:mod:`.rollout_lifecycle`) runs each task kind's phases on these parts.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors

from contagent.agents import DEFAULT_AGENT, Agent, AgentSettings, Launch
from contagent.agents.base import IN_CONTAINER, WORKSPACE
from contagent.errors import ContagentError
from contagent.layout import RolloutPaths, RunPaths
from contagent.rawlog.compact import compact_rollout
from contagent.rawlog.read import read_exchanges
from contagent.rawlog.result import (
    LlmSettings,
    TokenTotals,
)
from contagent.runner import docker_ops
from contagent.runner.config import RunConfig, rollout_name
from contagent.runner.tasks.task_kind import Task
from contagent.wire.chat import sum_usage

log = logging.getLogger(__name__)


#: ``stop_condition`` of a rollout whose files could not all be written into --log-dir
LOG_DIR_STOP = "log_dir"


class LogDirError(ContagentError):
    """A rollout's files could not be written into ``--log-dir`` (a full disk, say)."""

    exit_code = 1


def unwritable(path: Path, exc: OSError) -> LogDirError:
    return LogDirError(f"cannot write {path}: {exc.strerror or exc}")


@dataclass(frozen=True)
class RolloutPlan:
    experiment: Task
    repeat_index: int
    agent: str = DEFAULT_AGENT
    #: several agents in one run: the rollout name carries the agent
    agent_in_name: bool = False
    #: the proxy records token data (``--tokens``, resolved by the run's preflight)
    tokens: bool = False
    #: the LLM server the preflight found (``{"name", "version", "logprobs_mode", ...}``)
    server: dict[str, Any] | None = None
    #: the server's default sampling as the preflight learnt it, None: not known
    sampling_server: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        suffix = self.agent if self.agent_in_name else None
        return rollout_name(self.experiment.name, self.repeat_index, suffix)


@dataclass
class RunContext:
    """Shared by every rollout of one ``contagent run``."""

    config: RunConfig
    paths: RunPaths
    client: docker.DockerClient
    cancel: threading.Event
    node: str | None = None  # recorded in result.json as where the rollout ran
    #: why ``cancel`` was set: the error of the rollouts it stops
    cancel_reason: str = "interrupted"

    def labels(self, rollout: str, role: str) -> dict[str, str]:
        driver = self.config.driver
        return {
            **(driver.labels() if driver is not None else {}),
            docker_ops.LABEL_RUN: self.config.run_id,
            docker_ops.LABEL_OWNER: self.config.owner,
            docker_ops.LABEL_ROLLOUT: rollout,
            docker_ops.LABEL_ROLE: role,
        }


def agent_settings(
    ctx: RunContext,
    plan: RolloutPlan,
    agent: Agent,
    base_url: str,
    skills: tuple[str, ...] | None = None,
    **where: str,
) -> tuple[dict[str, Any], Launch, LlmSettings]:
    """The agent's settings and launch; ``skills``: the skills the agent is given (else the
    experiment's); ``where``: AgentSettings paths other than the runner image's (a task
    image's workspace and skills folder)."""
    llm = ctx.config.llm
    effective = LlmSettings(
        model=agent.model_string(llm.served_model_name),
        base_url=base_url,
        num_retries=llm.num_retries,
        timeout_s=llm.timeout_s,
        reasoning_effort=llm.reasoning_effort,
        temperature=llm.temperature,
        top_p=llm.top_p,
        max_output_tokens=llm.max_output_tokens,
        extra_body=dict(llm.extra_body),
        max_iterations=ctx.config.max_iterations,
    )
    given = AgentSettings(
        task=plan.experiment.spec.task,
        served_model_name=llm.served_model_name,
        base_url=base_url,
        num_retries=llm.num_retries,
        timeout_s=llm.timeout_s,
        max_iterations=ctx.config.max_iterations,
        reasoning_effort=llm.reasoning_effort,
        temperature=llm.temperature,
        top_p=llm.top_p,
        max_output_tokens=llm.max_output_tokens,
        extra_body=dict(llm.extra_body),
        skills=(tuple(plan.experiment.spec.skills) if skills is None else skills)
        if "skills" in agent.honours
        else (),
        **where,
    )
    launch = agent.launch(given)
    settings = {
        "workspace": WORKSPACE,
        "setup_script": f"{IN_CONTAINER}/experiment/setup.sh",
        "evaluate_script": f"{IN_CONTAINER}/experiment/evaluate.sh",
        "out_dir": given.out_dir,
        "launch": {"argv": launch.argv, "env": launch.env},
    }
    return settings, launch, effective


#: request keys that carry the conversation, not settings (chat; Responses API)
_CONVERSATION_KEYS = frozenset({"messages", "tools", "input", "instructions"})


def token_totals(exchanges: Path) -> tuple[TokenTotals, dict[str, Any] | None]:
    """Usage summed over the raw log as the exporter counts it, and the first request's
    settings as sent on the wire. A log the reader refuses gives empty totals: the
    exporter reports why."""
    if not exchanges.is_file():
        return TokenTotals(exchanges=0, with_usage=0), None
    try:
        raw = read_exchanges(exchanges)
    except ContagentError:
        return TokenTotals(exchanges=0, with_usage=0), None
    usages = [u for u in (raw.usage(i) for i in sorted(raw.outcomes)) if u is not None]
    wire: dict[str, Any] | None = None
    for index in sorted(raw.requests):
        body = raw.requests[index].get("body")
        if isinstance(body, dict):
            wire = {k: v for k, v in body.items() if k not in _CONVERSATION_KEYS}
            break
    return TokenTotals(
        exchanges=len(raw.requests), with_usage=len(usages), **sum_usage(usages)
    ), wire


def write_json_atomic(path: Path, text: str) -> None:
    """All of ``text`` at ``path`` or nothing there: a half-written result.json would be
    read as no verdict at best."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise unwritable(path, exc) from None


def write_file(path: Path, data: bytes) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise unwritable(path, exc) from None


def start_rollout_proxy(ctx: RunContext, plan: RolloutPlan, name: str, net: Any) -> Any:
    """The rollout's own recording proxy on its network's gateway, answering that network
    alone and recording only rollout ``name``."""
    from contagent.proxy import ProxyOptions, start_proxy_in_thread

    cfg = ctx.config
    options = ProxyOptions(
        host=net.gateway,
        port=0,
        upstream_api_key=cfg.api_key,
        upstream_ca=cfg.upstream_ca,
        upstream_timeout=cfg.llm.timeout_s + 30,
        only_rollout=name,
        allowed_clients=net.subnet,
        tokens=plan.tokens,
        server=plan.server,
        sampling=cfg.sampling.learnt(plan.server, plan.sampling_server),
        chat_template=cfg.chat_template,
        policy=cfg.policy,
        messages_route=cfg.routes[0],
        responses_route=cfg.routes[1],
    )
    return start_proxy_in_thread(cfg.upstream_url, ctx.paths.rollouts_dir, options)


def compact_finished(paths: RolloutPaths) -> None:
    """Compact an ended rollout's raw log; one that cannot be is kept plain, with a warning."""
    if not paths.exchanges.exists():
        return  # nothing recorded, or compacted already
    done = compact_rollout(paths)
    if done.status not in ("compacted", "already"):
        log.warning("rollout %s: raw log not compacted: %s", paths.rollout_id, done.note)
