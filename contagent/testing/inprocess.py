"""An executor stand-in for tests and benchmarks: rollouts without Docker.

Each rollout is a scripted agent in a thread of this process. It talks to the LLM
(the scripted stub, or any OpenAI-compatible server) through its own real
recording proxy, started as ``contagent run`` starts one per rollout (the run's
policy gate and token settings included), and ends with a ``result.json`` whose
verdict a callable decides. Everything after the rollout (compaction, export,
the engine's groups) is the real code::

    from functools import partial
    engine = Engine(config, executor=partial(InProcessExecutor, steps=3))

The agent sends ``steps`` chat completions, each the conversation so far with
the model's answers sent back as they came (so the stub's token ids keep the
prefix property), and the scripted model (:func:`agent_script`) calls a tool
until the last step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, cast

import requests

from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.runner.config import RunConfig
from contagent.runner.executors.executor import OnStarted
from contagent.runner.lifecycle.rollout import (
    RolloutPlan,
    RunContext,
    compact_finished,
    start_rollout_proxy,
    token_totals,
    write_json_atomic,
)
from contagent.runner.tasks.experiment import ExperimentProblem
from contagent.testing.llm_stub import Reply, StubRequest, ToolCall

#: What a rollout ended as: (status, reward); ``attempt`` counts from 1 per rollout.
Verdict = Callable[[RolloutPlan, int], tuple[str, float | None]]

_TOOL = {
    "type": "function",
    "function": {
        "name": "bash",
        "description": "Run a shell command.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
}


def agent_script(req: StubRequest) -> Reply:
    """The scripted model: a tool call per step, a final answer when the request's last
    message says it is the last step."""
    messages = req.json.get("messages", []) if isinstance(req.json, dict) else []
    last = messages[-1].get("content") if messages else None
    step = sum(1 for m in messages if m.get("role") == "assistant")
    if isinstance(last, str) and last.startswith("last step"):
        return Reply(content=f"done after {step} steps")
    return Reply(content=None, tool_calls=[ToolCall("bash", {"command": f"echo {step}"})])


def _passes(plan: RolloutPlan, attempt: int) -> tuple[str, float | None]:
    return "passed", 1.0


class _Net:
    """Where a rollout's proxy listens: the loopback, serving only this host."""

    gateway = "127.0.0.1"
    subnet = "127.0.0.1/32"


class InProcessExecutor:
    """A :class:`~contagent.runner.executor.RolloutExecutor` running scripted agents in
    threads, each behind its own recording proxy; ``verdict`` decides each attempt's
    status and reward (an ``infra_error`` writes its result as a failed rollout would);
    ``extra_body`` is merged into every request the agent sends (``tool_choice``, ...)."""

    def __init__(
        self,
        config: RunConfig,
        paths: RunPaths,
        on_started: OnStarted,
        *,
        steps: int = 3,
        verdict: Verdict = _passes,
        step_delay: float = 0.0,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        self._config = config
        self._paths = paths
        self._on_started = on_started
        self._steps = steps
        self._verdict = verdict
        self._step_delay = step_delay
        self._extra_body = extra_body or {}
        self._cancel = threading.Event()
        self._reason = "interrupted"
        self._attempts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(config.jobs, thread_name_prefix="inprocess-rollout")
        # as the local executor: a finished rollout's slot frees before its log is compacted
        self._compactor = ThreadPoolExecutor(1, thread_name_prefix="inprocess-compact")

    def prepare(self, plans: list[RolloutPlan]) -> list[ExperimentProblem]:
        return []

    def submit(self, plan: RolloutPlan) -> Future[RolloutResult]:
        with self._lock:
            attempt = self._attempts[plan.name] = self._attempts.get(plan.name, 0) + 1
        return self._pool.submit(self._one, plan, attempt)

    def cancel(self, reason: str = "interrupted") -> None:
        self._reason = reason
        self._cancel.set()

    def close(self) -> None:
        self._cancel.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._compactor.shutdown(wait=True)

    def _one(self, plan: RolloutPlan, attempt: int) -> RolloutResult:
        self._on_started(plan.name)
        rpaths = self._paths.rollout(plan.name)
        rpaths.root.mkdir(parents=True, exist_ok=True)
        started = time.time()
        status, reward = self._verdict(plan, attempt)
        error = None
        ctx = cast(RunContext, _Ctx(self._config, self._paths))
        with start_rollout_proxy(ctx, plan, plan.name, _Net()) as px:
            try:
                steps = self._agent(px.rollout_base_url(plan.name))
            except (requests.RequestException, _Cancelled) as exc:
                status, reward, error = "infra_error", None, str(exc) or self._reason
                steps = 0
        totals, wire = token_totals(rpaths.exchanges)
        if status == "infra_error" and error is None:
            error = "the stand-in was told to fail this attempt"
        result = RolloutResult(
            rollout_id=plan.name,
            experiment=plan.experiment.name,
            model=self._config.llm.served_model_name,
            status=status,
            passed=None if status == "infra_error" else status == "passed",
            reward=reward,
            stop_condition="finished" if error is None else "error",
            started=started,
            ended=time.time(),
            duration_s=time.time() - started,
            run_id=self._config.run_id,
            repeat_index=plan.repeat_index,
            agent=plan.agent,
            iterations=steps,
            tokens=totals,
            wire_params=wire,
            error=error,
            server=plan.server,
        )
        write_json_atomic(rpaths.result, result.model_dump_json(indent=2, exclude_none=False))
        self._compactor.submit(compact_finished, rpaths)
        return result

    def _agent(self, base_url: str) -> int:
        """The scripted agent's loop; the number of steps it took."""
        llm = self._config.llm
        messages: list[dict[str, Any]] = [{"role": "user", "content": "Do the task."}]
        with requests.Session() as http:
            for step in range(self._steps):
                if self._cancel.is_set():
                    raise _Cancelled(self._reason)
                body: dict[str, Any] = {
                    "model": llm.served_model_name, "messages": messages, "tools": [_TOOL],
                    **self._extra_body,
                }  # fmt: skip
                if llm.temperature is not None:
                    body["temperature"] = llm.temperature
                answer = http.post(f"{base_url}/chat/completions", json=body, timeout=60)
                answer.raise_for_status()
                message = answer.json()["choices"][0]["message"]
                messages.append({k: v for k, v in message.items() if v is not None})
                for call in message.get("tool_calls") or []:
                    messages.append(
                        {"role": "tool", "tool_call_id": call["id"], "content": f"ran {step}"}
                    )
                if step + 2 == self._steps:
                    messages.append({"role": "user", "content": "last step: answer now"})
                if self._step_delay:
                    time.sleep(self._step_delay)
        return self._steps


class _Cancelled(Exception):
    pass


class _Ctx:
    """What :func:`start_rollout_proxy` reads of a run's context (no Docker client)."""

    def __init__(self, config: RunConfig, paths: RunPaths) -> None:
        self.config = config
        self.paths = paths
