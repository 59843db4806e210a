"""What a ``contagent run`` is asked to do: one frozen, checked set of options."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contagent.agents import AGENTS, DEFAULT_AGENT, get_agent
from contagent.errors import ContagentError
from contagent.proxy.policy_gate import PolicyGate
from contagent.proxy.sampling_options import SamplingPolicy
from contagent.proxy.tokens_mode import check_tokens_mode
from contagent.proxy.upstream import tls_context
from contagent.runner.stopping.leftovers import Driver
from contagent.wire import server_root

#: Rollout statuses that ``--resume`` treats as finished (an infra error is retried).
FINISHED_STATUSES = frozenset({"passed", "failed", "agent_error", "timeout"})


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + uuid.uuid4().hex[:6]


def upstream_base(url: str) -> str:
    """The LLM server's root URL: ``--vllm-url`` may end in ``/v1`` (OpenAI style) or not."""
    url = url.strip().rstrip("/")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ContagentError(f"--vllm-url {url!r} is not an http(s) URL")
    return server_root(url)


@dataclass(frozen=True)
class LlmOptions:
    """Settings the agent's LLM gets; every one is sent deliberately (see contagent.agents)."""

    served_model_name: str
    num_retries: int = 0
    timeout_s: float = 900.0
    reasoning_effort: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.served_model_name.strip():
            raise ContagentError("--served-model-name must not be empty")
        if self.num_retries < 0:
            raise ContagentError("--llm-retries must be 0 or more")
        if self.timeout_s <= 0:
            raise ContagentError("--llm-timeout must be positive")
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ContagentError("--temperature must be between 0 and 2")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ContagentError("--top-p must be in (0, 1]")
        reserved = {"messages", "model", "tools", "stream"} & set(self.extra_body)
        if reserved:
            raise ContagentError(f"--extra-body must not set {', '.join(sorted(reserved))}")


@dataclass(frozen=True)
class RunConfig:
    experiments_dir: Path
    log_dir: Path
    upstream_url: str
    llm: LlmOptions
    skills_dir: Path | None = None
    experiments: tuple[str, ...] = ()
    api_key: str | None = None
    upstream_ca: Path | None = None
    #: agent -> the image it runs in, where not the agent's own (``--image AGENT=NAME``)
    images: dict[str, str] = field(default_factory=dict)
    jobs: int = 1
    repeat: int = 1
    timeout_s: float = 3600.0
    max_iterations: int = 50
    resume: bool = False
    #: seconds to wait for the LLM server to answer, before the run and when it fails mid-run
    wait_for_llm_s: float = 600.0
    run_id: str = field(default_factory=new_run_id)
    owner: str = ""
    ray_address: str | None = None  # None: the local runner; else rollouts are Ray tasks
    rollout_cpus: float = 1.0  # CPUs each rollout's Ray task asks for
    #: the agents every experiment runs with (``--agent``, repeatable)
    agents: tuple[str, ...] = (DEFAULT_AGENT,)
    #: the process running the run, labelled on everything it creates (set by the run)
    driver: Driver | None = None
    #: record token data: auto (when the server is vLLM), on, off (``--tokens``)
    tokens: str = "auto"
    #: Harbor tasks: a route out for the agent phase too (the proxy stays the LLM's route)
    allow_internet: bool = False
    #: host variables a task's ``${VAR}`` env values may read (``--task-env``)
    task_env: tuple[str, ...] = ()
    #: ``--sampling-override`` / ``--sampling-defaults`` (the server's defaults come later)
    sampling: SamplingPolicy = field(default_factory=SamplingPolicy)
    #: ``--chat-template``: the template text sent with every chat request
    chat_template: str | None = None
    #: ``--messages-route`` and ``--responses-route`` (None: chat exactly when tokens are
    #: recorded)
    routes: tuple[str | None, str | None] = (None, None)
    #: a rollout engine's policy versions and pause, shared by every rollout's proxy (the
    #: local executor only: a gate lives in this process)
    policy: PolicyGate | None = field(default=None, compare=False, repr=False)

    def image_for(self, agent: str) -> str:
        """The image ``agent`` runs in: the one ``--image`` names for it, else its own."""
        return self.images.get(agent) or get_agent(agent).image

    def runner_images(self) -> list[tuple[str, str]]:
        """(agent, image) for every agent of the run: what each node must have."""
        return [
            (name, self.image_for(name))
            for name in self.agents
            if self.image_for(name)  # the oracle needs none
        ]

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ContagentError("--jobs must be 1 or more")
        if not self.rollout_cpus > 0:
            raise ContagentError("--rollout-cpus must be positive")
        if self.repeat < 1:
            raise ContagentError("--repeat must be 1 or more")
        if self.timeout_s <= 0:
            raise ContagentError("--timeout must be positive")
        if self.max_iterations < 1:
            raise ContagentError("--max-iterations must be 1 or more")
        check_tokens_mode(self.tokens)
        if not self.agents:
            raise ContagentError("--agent: at least one agent is needed")
        if self.policy is not None and self.ray_address is not None:
            raise ContagentError(
                "policy versions and pauses need the local executor: its proxies share "
                "this process's gate (leave out the Ray address)"
            )
        if len(set(self.agents)) != len(self.agents):
            raise ContagentError("--agent: each agent may be given once")
        for agent in (*self.agents, *self.images):
            get_agent(agent)
        if not self.wait_for_llm_s >= 0:  # also NaN
            raise ContagentError("--wait-for-llm must be 0 or more seconds")
        if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$", self.run_id):
            raise ContagentError(f"run id {self.run_id!r} is not a safe name")
        if self.upstream_ca is not None:
            if not self.upstream_url.startswith("https://"):
                raise ContagentError("--vllm-ca only applies to an https:// --vllm-url")
            tls_context(self.upstream_ca)  # a bad file stops the run before any container


def agent_images(pairs: Iterable[str]) -> dict[str, str]:
    """``--image AGENT=NAME`` values as agent -> image; an agent named twice must agree."""
    images: dict[str, str] = {}
    for pair in pairs:
        agent, sep, image = pair.partition("=")
        agent, image = agent.strip(), image.strip()
        if not sep or not agent or not image:
            raise ContagentError(f"--image {pair!r} is not AGENT=NAME")
        if agent not in AGENTS:
            known = ", ".join(sorted(AGENTS))
            raise ContagentError(
                f"--image {pair!r}: {agent!r} is not a known agent (known: {known})"
            )
        if images.setdefault(agent, image) != image:
            raise ContagentError(f"--image names two images for {agent}: {images[agent]}, {image}")
    return images


def rollout_name(experiment: str, repeat_index: int, agent: str | None = None) -> str:
    """The rollout id: the experiment name for the first repeat, ``<name>_r<k>`` after,
    then ``__<agent>`` when the run has several agents."""
    name = experiment if repeat_index == 0 else f"{experiment}_r{repeat_index}"
    return name if agent is None else f"{name}__{agent}"
