"""``contagent run``, ``contagent gc`` and ``contagent build``."""

from __future__ import annotations

import functools
import json
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from contagent.agents import AGENTS, DEFAULT_AGENT
from contagent.cli._common import console, fail, run_guarded
from contagent.cli.run_log import exit_line, open_journal
from contagent.errors import ContagentError

COMPAT_PANEL = "Compatibility options (accepted, not needed)"
#: Options of the seed pipeline's command lines: accepted, each with why it is not needed.
NOT_NEEDED = {
    "--network": "each rollout gets its own isolated network, and the agent reaches the LLM "
    "only through the recording proxy",
    "--vllm-internal-url": "the agent is given the recording proxy's address, never the "
    "server's; --vllm-url is the one server address",
    "--entrypoint-script": "the runner image's entrypoint and contagent's in-container driver "
    "start the agent",
    "--agent-server-image-repo": "the agent runs headless in its runner image, and no agent "
    "server is started; name that image with --image AGENT=NAME",
    "--agent-server-image-tag": "the agent runs headless in its runner image, and no agent "
    "server is started; name that image with --image AGENT=NAME",
}


def _not_needed(option: str) -> Any:
    return typer.Option(
        option, help=f"Not needed: {NOT_NEEDED[option]}.", rich_help_panel=COMPAT_PANEL
    )


_STYLES = {
    "ready": "green",
    "paused": "yellow",
    "stopped": "red",
    "stopping": "yellow",
    "left": "red",
    "leftovers": "yellow",
}


class _Progress:
    """Live counts while rollouts run; rendered by rich.live."""

    def __init__(self, journal: Any = None) -> None:
        self.journal = journal  # a RunLog: what the run says goes there too
        self.lock = threading.Lock()
        self.total = 0
        self.running: dict[str, float] = {}
        self.done = 0
        self.passed = 0
        self.failed = 0
        self.errors = 0
        self.tokens = 0
        self.nodes: dict[str, int] = {}  # rollouts finished on each node
        self.problems: list[str] = []
        self.status = ""  # the LLM server's, while the run waits for it
        self.t0 = time.monotonic()

    def on_event(self, event: Any) -> None:
        # printed outside the lock: printing refreshes the live display, which takes it
        if event.kind in _STYLES:
            console.print(
                f"[{_STYLES[event.kind]}]{event.kind}:[/]", Text(event.message), soft_wrap=True
            )
            if self.journal is not None:
                self.journal.line(f"{event.kind}: {event.message}")
        elif event.kind == "notice":
            console.print(f"[yellow]{event.name}:[/]", Text(event.message), soft_wrap=True)
        elif event.kind == "waiting" and not self.status:  # once; the live line shows the rest
            console.print(Text(event.message), soft_wrap=True)
        with self.lock:
            if event.kind == "waiting":
                self.status = event.message
            elif event.kind in ("ready", "stopped"):
                self.status = ""
            elif event.kind == "planned":
                self.total = event.total
            elif event.kind == "problem":
                self.problems.append(event.message)
            elif event.kind == "started":
                self.running[event.name] = time.monotonic()
            elif event.kind in ("finished", "skipped"):
                self.running.pop(event.name, None)
                result = event.result
                self.done += 1
                if result is not None:
                    self.passed += result.status == "passed"
                    self.failed += result.status == "failed"
                    self.errors += result.status not in ("passed", "failed")
                    if result.tokens is not None:
                        self.tokens += result.tokens.total_tokens
                    if event.kind == "finished" and result.node:
                        self.nodes[result.node] = self.nodes.get(result.node, 0) + 1

    def __rich__(self) -> Group:
        with self.lock:
            judged = self.passed + self.failed + self.errors
            rate = f"{100 * self.passed / judged:.0f}%" if judged else "-"
            head = Text.assemble(
                ("rollouts ", "bold"),
                f"{self.done}/{self.total} done  {len(self.running)} running  ",
                (f"{self.passed} passed  ", "green"),
                (f"{self.failed} failed  ", "red"),
                (f"{self.errors} errors  ", "yellow"),
                f"pass rate {rate}  tokens {self.tokens:,}  ",
                f"{time.monotonic() - self.t0:.0f}s",
            )
            now = time.monotonic()
            lines = [
                Text(f"  running {n} ({now - t:.0f}s)", style="dim")
                for n, t in sorted(self.running.items())
            ]
            if self.nodes:
                per_node = "  ".join(f"{n} {k}" for n, k in sorted(self.nodes.items()))
                lines.insert(0, Text(f"  done per node: {per_node}", style="dim"))
            if self.status:
                lines.insert(0, Text(self.status, style="yellow"))
            return Group(head, *lines)


def _summary_table(summary: Any) -> Table:
    table = Table(
        title=f"run {summary.run_id}  ({summary.wall_s:.1f}s)",
        caption=summary.exit_reason(),
    )
    for col in ("rollout", "status", "stop", "iter", "tokens", "wall s", "node", "note"):
        table.add_column(
            col,
            justify="right" if col in ("iter", "tokens", "wall s") else "left",
            no_wrap=col in ("rollout", "node"),
        )
    colour = {"passed": "green", "failed": "red"}
    for r in sorted([*summary.resumed, *summary.results], key=lambda r: r.rollout_id):
        note = "resumed" if r in summary.resumed else (r.error or "")
        table.add_row(
            r.rollout_id,
            Text(str(r.status), style=colour.get(str(r.status), "yellow")),
            r.stop_condition or "",
            "" if r.iterations is None else str(r.iterations),
            "" if r.tokens is None else f"{r.tokens.total_tokens:,}",
            "" if r.timings is None else f"{r.timings.wall_s:.1f}",
            r.node or "",
            note[:80],
        )
    for name in summary.not_started:
        table.add_row(name, Text("not started", style="yellow"), "", "", "", "", "", "run stopped")
    for p in summary.problems:
        table.add_row(p.name, Text("skipped", style="yellow"), "", "", "", "", "", p.message[:120])
    return table


def _extra_body(value: str | None) -> dict[str, Any]:
    if not value:
        return {}
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ContagentError(f"--extra-body is not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ContagentError("--extra-body must be a JSON object")
    return data


def register(app: typer.Typer) -> None:
    @app.command("run")
    def run_command(
        served_model_name: Annotated[str, typer.Option(help="Model name the LLM server serves.")],
        vllm_url: Annotated[
            str,
            typer.Option(
                help="The OpenAI-compatible LLM server the proxy forwards to (with or without /v1)."
            ),
        ] = "http://127.0.0.1:8000/v1",
        api_key: Annotated[
            str | None,
            typer.Option(
                envvar="CONTAGENT_API_KEY",
                help="Key for the LLM server; given to the proxy only, never to the agent.",
            ),
        ] = None,
        vllm_ca: Annotated[
            Path | None,
            typer.Option(
                help="PEM file of the CA(s) signing an https --vllm-url's certificate "
                "(instead of the system's store)."
            ),
        ] = None,
        tokens: Annotated[
            str,
            typer.Option(
                help="Record token ids and logprobs of chat completions: auto (when the LLM "
                "server is vLLM), on (an error unless it is), off. See docs/tokens.md."
            ),
        ] = "auto",
        experiments_dir: Annotated[Path, typer.Option(help="Folder of experiment folders.")] = Path(
            "experiments"
        ),
        experiment: Annotated[
            list[str] | None, typer.Option(help="Run only this experiment (repeatable).")
        ] = None,
        log_dir: Annotated[Path, typer.Option(help="Where logs and rollout folders go.")] = Path(
            "logs"
        ),
        skills_dir: Annotated[
            Path, typer.Option(help="Folder of skill folders (<name>/SKILL.md).")
        ] = Path("skills"),
        agent: Annotated[
            list[str] | None,
            typer.Option(
                help=f"Agent to run each experiment with (repeatable; default {DEFAULT_AGENT}): "
                f"{', '.join(AGENTS)}. With several, rollout names end in __<agent>."
            ),
        ] = None,
        image: Annotated[
            list[str] | None,
            typer.Option(
                help="AGENT=NAME: the runner image AGENT runs in (repeatable; default: the "
                "image `contagent build --agent AGENT` makes)."
            ),
        ] = None,
        allow_internet: Annotated[
            bool,
            typer.Option(
                "--allow-internet",
                help="Harbor tasks: give the agent phase a route out too (the LLM still "
                "goes through the recording proxy).",
            ),
        ] = False,
        task_env: Annotated[
            list[str] | None,
            typer.Option(
                help="A host variable a Harbor task's ${VAR} env values may read (repeatable); "
                "no other is ever read."
            ),
        ] = None,
        openhands_image: Annotated[
            str | None, typer.Option(help="Same as --image openhands=NAME.")
        ] = None,
        jobs: Annotated[
            int, typer.Option(help="Rollouts in parallel (across the cluster with --ray-address).")
        ] = 1,
        ray_address: Annotated[
            str | None,
            typer.Option(
                help="Run each rollout as a task on this Ray cluster (`auto` or HOST:PORT; "
                "needs `pip install 'contagent[ray]'`); default: on this host."
            ),
        ] = None,
        rollout_cpus: Annotated[
            float, typer.Option(help="CPUs each rollout's Ray task asks for (with --ray-address).")
        ] = 1.0,
        repeat: Annotated[int, typer.Option(help="Rollouts per experiment.")] = 1,
        timeout: Annotated[
            float,
            typer.Option(
                help="Seconds per rollout (setup, agent and evaluation) before it is stopped as `timeout`."
            ),
        ] = 3600.0,
        max_iterations: Annotated[int, typer.Option(help="Agent iteration limit.")] = 50,
        temperature: Annotated[
            float | None,
            typer.Option(help="Sampling temperature sent to the server (default: not sent)."),
        ] = None,
        top_p: Annotated[
            float | None, typer.Option(help="top_p sent to the server (default: not sent).")
        ] = None,
        reasoning_effort: Annotated[
            str | None,
            typer.Option(
                help="reasoning_effort sent to the server (default: not sent; OpenHands would send 'high')."
            ),
        ] = None,
        max_output_tokens: Annotated[
            int | None, typer.Option(help="Completion token limit per call (default: not sent).")
        ] = None,
        extra_body: Annotated[
            str | None,
            typer.Option(
                help="JSON object merged into every request body, e.g. '{\"top_k\": 20}'."
            ),
        ] = None,
        llm_timeout: Annotated[
            float, typer.Option(help="Seconds per LLM request before the agent gives up on it.")
        ] = 900.0,
        llm_retries: Annotated[
            int,
            typer.Option(
                help="Times the agent re-sends a failed LLM request (each is a duplicate in the log)."
            ),
        ] = 0,
        wait_for_llm: Annotated[
            float,
            typer.Option(
                help="Seconds to wait for the LLM server to answer GET /v1/models listing "
                "--served-model-name, before the run and when rollouts fail on it mid-run "
                "(0: do not wait)."
            ),
        ] = 600.0,
        resume: Annotated[
            bool,
            typer.Option(
                help="Skip rollouts already finished in --log-dir; re-run unfinished ones."
            ),
        ] = False,
        run_id: Annotated[
            str | None,
            typer.Option(
                help="Name of this run (labels on its containers); default: time + random."
            ),
        ] = None,
        network: Annotated[str | None, _not_needed("--network")] = None,
        vllm_internal_url: Annotated[str | None, _not_needed("--vllm-internal-url")] = None,
        entrypoint_script: Annotated[str | None, _not_needed("--entrypoint-script")] = None,
        agent_server_image_repo: Annotated[
            str | None, _not_needed("--agent-server-image-repo")
        ] = None,
        agent_server_image_tag: Annotated[
            str | None, _not_needed("--agent-server-image-tag")
        ] = None,
    ) -> None:
        """Run experiments in Docker with a headless agent, recording every LLM exchange.

        Exit 0 when every rollout reached a verdict (passed, failed, timeout, agent_error);
        1 when an experiment was skipped as invalid, a rollout is infra_error, the run
        stopped because the LLM server stayed down, or it never answered; 2 for unusable
        input (options, image, an LLM server that refuses the key, the CA or the model
        name); 128 plus the signal's number when a signal stops it: 130 Ctrl-C (SIGINT),
        143 SIGTERM, 129 SIGHUP (see docs/runner.md, "Stopping a run").
        """
        from contagent.runner.config import (
            LlmOptions,
            RunConfig,
            agent_images,
            new_run_id,
            upstream_base,
        )
        from contagent.runner.run import run_experiments
        from contagent.runner.signals import signal_name, stop_on_signals, stop_signal

        compat = (
            network,
            vllm_internal_url,
            entrypoint_script,
            agent_server_image_repo,
            agent_server_image_tag,
        )
        for option, value in zip(NOT_NEEDED, compat, strict=True):
            if value is not None:
                console.print(
                    f"[yellow]note:[/] {option} is not needed: {NOT_NEEDED[option]}; ignored",
                    soft_wrap=True,
                    highlight=False,
                )
        aliases = [] if openhands_image is None else [f"openhands={openhands_image}"]

        def build_config() -> RunConfig:
            return RunConfig(
                experiments_dir=experiments_dir,
                log_dir=log_dir,
                skills_dir=skills_dir if skills_dir.is_dir() else None,
                upstream_url=upstream_base(vllm_url),
                api_key=api_key,
                upstream_ca=vllm_ca,
                tokens=tokens,
                llm=LlmOptions(
                    served_model_name=served_model_name,
                    num_retries=llm_retries,
                    timeout_s=llm_timeout,
                    reasoning_effort=reasoning_effort,
                    temperature=temperature,
                    top_p=top_p,
                    max_output_tokens=max_output_tokens,
                    extra_body=_extra_body(extra_body),
                ),
                experiments=tuple(experiment or ()),
                images=agent_images([*(image or ()), *aliases]),
                agents=tuple(agent or (DEFAULT_AGENT,)),
                allow_internet=allow_internet,
                task_env=tuple(task_env or ()),
                jobs=jobs,
                ray_address=ray_address,
                rollout_cpus=rollout_cpus,
                repeat=repeat,
                timeout_s=timeout,
                max_iterations=max_iterations,
                resume=resume,
                wait_for_llm_s=wait_for_llm,
                run_id=run_id or new_run_id(),
            )

        config = run_guarded(build_config)
        journal = open_journal(config)
        progress = _Progress(journal)

        def run() -> Any:
            with stop_on_signals(config.run_id, journal.line):
                try:
                    with Live(progress, console=console, refresh_per_second=4, transient=True):
                        return run_experiments(config, progress.on_event)
                except ContagentError as exc:
                    journal.line(f"contagent: error: {exc}")
                    raise
                except KeyboardInterrupt as exc:
                    journal.line(
                        f"contagent: error: interrupted by {signal_name(stop_signal(exc))}"
                    )
                    raise

        summary = run_guarded(run)

        def say(*what: Any) -> None:
            console.print(*what, soft_wrap=True)
            journal.render(*what)

        for message in progress.problems:
            say("[yellow]skipped:[/]", Text(message))
        say(_summary_table(summary))
        everything = [*summary.resumed, *summary.results]
        passed = sum(r.status == "passed" for r in everything)
        used = sum(r.tokens.total_tokens for r in everything if r.tokens is not None)
        rate = f" ({100 * passed / len(everything):.0f}%)" if everything else ""
        say(f"passed {passed}/{len(everything)}{rate}, tokens {used:,}")
        say(
            Text(
                f"logs: {summary.log_dir}   export: contagent export {summary.log_dir / 'rollouts'} --out OUT"
            )
        )
        end = exit_line(summary)
        if end is not None:
            journal.line(f"contagent: error: {end}")
            fail(end, summary.exit_code)
        journal.line(summary.exit_reason())
        if summary.exit_code:
            raise typer.Exit(summary.exit_code)

    @app.command("gc")
    def gc_command(
        run_id: Annotated[str | None, typer.Option(help="Only this run's leftovers.")] = None,
        owner: Annotated[
            str | None,
            typer.Option(help="Owner label to clean (default: you, as `contagent run` labels it)."),
        ] = None,
        images: Annotated[
            bool,
            typer.Option(
                "--images",
                help="Also remove your cached Harbor task images and agent-derived images.",
            ),
        ] = False,
    ) -> None:
        """Remove containers and networks left by your runs (never another owner's).

        Without --run-id only runs whose driver process is gone from this host are cleaned;
        live runs are spared and said, runs of other hosts listed. --run-id removes exactly
        that run. --images also removes your cached Harbor task and agent-derived images."""
        from contagent.runner import docker_ops, leftovers

        who = owner or docker_ops.default_owner()
        done = run_guarded(lambda: leftovers.gc(who, run_id))
        for line in done.lines:
            console.print(Text(line), soft_wrap=True)
        console.print(f"removed {done.containers} containers, {done.networks} networks")
        if images:
            from contagent.runner.agent_image import gc_images

            tags = run_guarded(lambda: gc_images(docker_ops.connect(), who))
            console.print(f"removed {len(tags)} cached images")

    @app.command("build")
    def build_command(
        agent: Annotated[
            list[str] | None,
            typer.Option(
                help=f"Build the image of this agent (repeatable; default {DEFAULT_AGENT})."
            ),
        ] = None,
        tag: Annotated[
            str | None,
            typer.Option(help="Image name (one agent only; default: the agent's own image name)."),
        ] = None,
        base_image: Annotated[
            str, typer.Option(help="Base image with Python 3.12+.")
        ] = "python:3.13-slim",
        ca_bundle: Annotated[
            Path | None,
            typer.Option(help="CA bundle pip trusts during the build (TLS-intercepting proxies)."),
        ] = None,
    ) -> None:
        """Build the runner image of each chosen agent (its pinned agent on the base image).

        On a Ray cluster every node running rollouts needs the images under the names the run
        uses: build them on each node, or build once, tag with your registry's name
        (--tag REGISTRY/contagent-runner:TAG, one --agent at a time), push, pull on each node
        and pass that name to `contagent run` as --image AGENT=NAME.
        """
        from contagent.agents import get_agent
        from contagent.runner.build import build_image

        names = agent or [DEFAULT_AGENT]
        if tag is not None and len(names) > 1:
            fail("--tag names one image: give one --agent with it")
        specs = run_guarded(lambda: [get_agent(n) for n in names])
        for name, spec in zip(names, specs, strict=True):
            if not spec.image:
                fail(f"{name} has no runner image to build: it runs with what the task image has")
            result = run_guarded(
                functools.partial(
                    build_image,
                    tag or spec.image,
                    base_image,
                    ca_bundle,
                    on_line=lambda line: console.print(line, markup=False, highlight=False),
                    dockerfile=spec.dockerfile,
                )
            )
            console.print(
                f"built {result.image} ({result.image_id[:19]}) for {name} from {result.base_image}"
            )
