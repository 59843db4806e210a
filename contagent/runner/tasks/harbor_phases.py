"""The phases of one Harbor rollout, driven from the host into a long-running sandbox.

The sandbox starts from the derived image (the task image with the agent layered
on) and its healthcheck is waited for; the agent runs with the recording proxy as
its only route (``--allow-internet`` adds one out); every process in the sandbox is
then stopped, the network switched to the verifier's, ``tests/`` copied in, old
reward files removed and ``tests/test.sh`` run as the verifier's user (made
runnable for it as root, as Harbor does).
"""

from __future__ import annotations

import logging
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import docker.errors

from contagent.agents import LAYERS, Agent
from contagent.agents.base import AGENT_DIR, OUT_DIR, runs_solution
from contagent.agents.oracle import SOLUTION_DIR
from contagent.errors import ContagentError
from contagent.layout import safe_segment
from contagent.rawlog.result import LlmSettings
from contagent.runner.images import agent_image
from contagent.runner.lifecycle.rollout import RolloutPlan, RunContext, agent_settings
from contagent.runner.lifecycle.sandbox import Sandbox
from contagent.runner.tasks.harbor_reward import parse_reward
from contagent.runner.tasks.harbor_task import HarborTask

log = logging.getLogger(__name__)

VERIFIER_DIR = "/logs/verifier"


@dataclass
class Outcome:
    codes: dict[str, int | None] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    agent_timed_out: bool = False
    verifier_timed_out: bool = False
    reward: float | None = None
    rewards: dict[str, float] | None = None
    reward_error: str | None = None
    setup_error: str | None = None
    #: the phases' limits as a verdict names them
    agent_limit: str = ""
    verifier_limit: str = ""
    #: the image the sandbox ran, once derived
    image: str | None = None
    #: the agent's effective LLM settings, once given
    llm: LlmSettings | None = None


def _container_options(task: HarborTask) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    if task.cpus is not None:
        opts["nano_cpus"] = int(task.cpus * 1e9)
    if task.memory_mb is not None:
        opts["mem_limit"] = f"{task.memory_mb}m"
    if task.storage_mb is not None:
        opts["storage_opt"] = {"size": f"{task.storage_mb}M"}
    return opts


def _create(ctx: RunContext, task: HarborTask, image: str, **kwargs: Any) -> Any:
    try:
        return ctx.client.containers.create(
            image,
            entrypoint=["sh", "-c", "sleep infinity"],
            command=[],
            init=True,
            **_container_options(task),
            **kwargs,
        )
    except docker.errors.APIError as exc:
        text = str(exc.explanation or exc)
        if task.storage_mb is not None and "storage" in text.lower():
            raise ContagentError(
                f"storage_mb = {task.storage_mb}: this Docker engine cannot limit a "
                f"container's storage ({text.splitlines()[0][:200]})"
            ) from None
        raise


def _wait_healthy(sb: Sandbox, task: HarborTask, cancelled: Any) -> str | None:
    """None once the healthcheck passes; else why it did not."""
    hc = task.healthcheck
    if hc is None:
        return None
    t0 = time.monotonic()
    failures = 0
    while not cancelled():
        result = sb.exec(
            ["sh", "-c", hc.command],
            deadline=time.monotonic() + hc.timeout_s,
            cancelled=cancelled,
        )
        if result.code == 0:
            return None
        in_grace = time.monotonic() - t0 < hc.start_period_s
        if not in_grace:
            failures += 1
            if failures >= hc.retries:
                last = (
                    f"timed out after {hc.timeout_s:g} s"
                    if result.code is None
                    else f"exited {result.code}"
                )
                return (
                    f"the healthcheck failed {failures} times (the last {last}), "
                    f"never healthy: {hc.command[:100]}"
                )
        time.sleep(hc.start_interval_s if in_grace else hc.interval_s)
    return "cancelled while waiting for the healthcheck"


#: Bounds on the skills read from a task image's ``skills_dir`` (untrusted input).
SKILLS_LIMIT = 200


def image_skills(sb: Sandbox, path: str) -> tuple[str, ...]:
    """The skills in the sandbox's ``path``: each folder holding a ``SKILL.md``, by name."""
    listing = sb.output(
        f"cd {shlex.quote(path)} 2>/dev/null || exit 0; "
        'for d in */; do [ -f "$d/SKILL.md" ] && printf "%s\\n" "${d%/}"; done'
    )
    names = []
    for name in listing.splitlines():
        try:
            names.append(safe_segment(name, "skill name"))
        except ContagentError:
            log.warning("skill folder %r in %s skipped: not a plain name", name, path)
    return tuple(sorted(names)[:SKILLS_LIMIT])


def _agent_files(
    task: HarborTask, agent: Agent, launch: Any
) -> list[tuple[str, Path | bytes, int]]:
    entries: list[tuple[str, Path | bytes, int]] = [
        (f"{AGENT_DIR.lstrip('/')}/{p}", data, mode) for p, data, mode in launch.files
    ]
    if runs_solution(agent):
        if not (task.solution_dir / "solve.sh").is_file():
            raise ContagentError(f"{task.solution_dir / 'solve.sh'}: missing (the oracle runs it)")
        entries.append((SOLUTION_DIR.lstrip("/"), task.solution_dir, 0))
    return entries


def _own_agent_files(sb: Sandbox, task: HarborTask, agent: Agent) -> None:
    """What was copied in for the agent is root's; the agent phase's user (``[agent] user``)
    must be able to run the solution and write the agent's own files."""
    steps = []
    if runs_solution(agent):
        steps.append(f"chmod -R a+rX {SOLUTION_DIR} && chmod a+x {SOLUTION_DIR}/solve.sh")
    if task.agent_user is not None:
        steps.append(f"mkdir -p {AGENT_DIR} && chown -R {shlex.quote(task.agent_user)} {AGENT_DIR}")
    if steps and sb.sh(" && ".join(steps)) != 0:
        raise ContagentError(f"cannot give the agent's files to [agent] user {task.agent_user}")


def _agent_phase(
    sb: Sandbox,
    task: HarborTask,
    agent: Agent,
    launch: Any,
    workdir: str,
    timeout_s: float,
    ctx: RunContext,
    out: Outcome,
) -> None:
    """The agent's command, its output in the sandbox's out folder, until it ends or times out."""
    wrapped = [
        "sh",
        "-c",
        f'exec "$@" >{OUT_DIR}/agent.stdout 2>{OUT_DIR}/agent.stderr </dev/null',
        "sh",
        *launch.argv,
    ]
    extra = task.solution_env if runs_solution(agent) else {}
    result = sb.exec(
        wrapped,
        deadline=time.monotonic() + timeout_s,
        cancelled=ctx.cancel.is_set,
        user=task.agent_user,
        workdir=workdir,
        env={**launch.env, **extra},
    )
    out.codes["agent"] = result.code
    out.agent_timed_out = result.timed_out
    out.timings["agent_s"] = result.seconds


def _verifier_phase(
    sb: Sandbox, task: HarborTask, workdir: str, ctx: RunContext, out: Outcome, collected: Path
) -> None:
    """``tests/`` in, old rewards out, ``test.sh`` run, the reward read."""
    out.verifier_limit = f"its {task.verifier_timeout_s:g} s limit ([verifier] timeout_sec)"
    sb.put([("tests", task.tests_dir, 0)])
    # as root, so that the verifier's user ([verifier] user) can run the tests, as Harbor does
    sb.sh(
        f"chmod -R a+rX /tests && chmod a+x /tests/test.sh; "
        f"rm -f {VERIFIER_DIR}/reward.txt {VERIFIER_DIR}/reward.json; mkdir -p {VERIFIER_DIR}"
    )
    script = f"/tests/test.sh > {VERIFIER_DIR}/test-stdout.txt 2>&1"
    verify = sb.exec(
        ["sh", "-c", script],
        deadline=time.monotonic() + task.verifier_timeout_s,
        cancelled=ctx.cancel.is_set,
        user=task.verifier_user,
        workdir=workdir,
        env=task.verifier_env,
    )
    out.codes["evaluate"] = verify.code
    out.verifier_timed_out = verify.timed_out
    out.timings["evaluate_s"] = verify.seconds
    if sb.get(VERIFIER_DIR, collected):
        out.reward, out.rewards, out.reward_error = parse_reward(collected / "verifier")
    else:
        out.reward_error = f"no {VERIFIER_DIR} in the sandbox"


def run_phases(
    ctx: RunContext,
    plan: RolloutPlan,
    agent: Agent,
    out: Outcome,
    where: tuple[str, Any, Any],
    collected: Path,
) -> None:
    """Every phase of the rollout, ``where`` being its container name prefix, network and
    recording proxy; what the phases left is copied into ``collected``, and what they gave
    (the image, the agent's LLM settings included) into ``out``."""
    task = plan.experiment
    assert isinstance(task, HarborTask)
    (prefix, net, proxy), cfg, name = where, ctx.config, plan.name
    t0 = time.monotonic()
    runner = cfg.image_for(agent.name) or None  # the oracle has no runner image
    out.image = image = agent_image.derived_image(
        ctx.client, task, agent.name, runner, LAYERS.get(agent.name), cfg.owner
    )
    outside: Any = None
    if cfg.allow_internet or task.verifier_network == "public":
        outside = ctx.client.networks.create(
            f"{prefix}-out", driver="bridge", labels=ctx.labels(name, "network")
        )
    workdir = task.workdir or ctx.client.images.get(image).attrs["Config"].get("WorkingDir")
    workdir = workdir or "/"
    container = _create(
        ctx,
        task,
        image,
        name=f"{prefix}-sandbox",
        hostname="sandbox",
        network=net.name,
        labels=ctx.labels(name, "sandbox"),
        environment={**task.env, "CONTAGENT_ROLLOUT": name},
        working_dir=workdir,
    )
    sb = Sandbox(ctx.client, container)
    if cfg.allow_internet and outside is not None:
        outside.connect(container)
    sb.start()
    dirs = f"{OUT_DIR} /logs/agent {VERIFIER_DIR}"
    sb.sh(f"mkdir -p {dirs} && chmod 777 {dirs}")
    found: dict[str, Any] = {"workspace": workdir, "out_dir": OUT_DIR}
    if task.skills_path is not None:
        found.update(skills=image_skills(sb, task.skills_path), skills_dir=task.skills_path)
    _, launch, out.llm = agent_settings(ctx, plan, agent, proxy.rollout_base_url(name), **found)
    sb.put(_agent_files(task, agent, launch))
    _own_agent_files(sb, task, agent)
    out.setup_error = _wait_healthy(sb, task, ctx.cancel.is_set)
    out.codes["setup"] = 0 if out.setup_error is None else 1
    out.timings["setup_s"] = time.monotonic() - t0
    if out.setup_error is not None:
        return

    limit = task.agent_timeout_s or cfg.timeout_s
    source = "--timeout" if task.agent_timeout_s is None else "[agent] timeout_sec"
    out.agent_limit = f"its {limit:g} s limit ({source})"
    _agent_phase(sb, task, agent, launch, workdir, limit, ctx, out)

    # Nothing the agent started may see the tests, rewrite the reward or use the route.
    sb.stop_everything()
    sb.get(OUT_DIR, collected)
    ctx.client.networks.get(net.id).disconnect(container, force=True)
    if cfg.allow_internet and outside is not None and task.verifier_network != "public":
        outside.disconnect(container, force=True)
    elif not cfg.allow_internet and outside is not None:
        outside.connect(container)
    if ctx.cancel.is_set():
        return
    sb.start()
    _verifier_phase(sb, task, workdir, ctx, out, collected)
