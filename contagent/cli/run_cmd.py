"""``contagent run``: its options are in :mod:`contagent.cli.run_options`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from contagent.agents import DEFAULT_AGENT
from contagent.cli import rl_options as rl
from contagent.cli import run_options as opt
from contagent.cli._common import console, fail, run_guarded
from contagent.cli.run_log import RunLog, exit_line, open_journal
from contagent.errors import ContagentError

if TYPE_CHECKING:
    from contagent.cli.run_view import Progress
    from contagent.runner.config import RunConfig
    from contagent.runner.summary import RunSummary


def _note_not_needed(values: tuple[str | None, ...]) -> None:
    """One line for each compatibility option given: why it is not needed."""
    for option, value in zip(opt.NOT_NEEDED, values, strict=True):
        if value is not None:
            console.print(
                f"[yellow]note:[/] {option} is not needed: {opt.NOT_NEEDED[option]}; ignored",
                soft_wrap=True,
                highlight=False,
            )


def _run(
    config: RunConfig, progress: Progress, journal: RunLog, stream: Path | None = None
) -> RunSummary:
    """Run ``config``'s experiments under the live display (each finished group streamed
    to ``stream``); the run log says why it ended when an error or a signal ends it."""
    from rich.live import Live

    from contagent.runner.run import run_experiments
    from contagent.runner.stopping.signals import signal_name, stop_on_signals, stop_signal
    from contagent.runner.summary import RunEvent

    on_event = progress.on_event
    streamer = None
    if stream is not None:
        from contagent.engine.sample_stream import SampleStream

        streamer = SampleStream(stream, config.log_dir, config.repeat)

        def on_event(event: RunEvent) -> None:
            progress.on_event(event)
            streamer.on_event(event)

    with stop_on_signals(config.run_id, journal.line):
        try:
            with Live(progress, console=console, refresh_per_second=4, transient=True):
                return run_experiments(config, on_event)
        except ContagentError as exc:
            journal.line(f"contagent: error: {exc}")
            raise
        except KeyboardInterrupt as exc:
            journal.line(f"contagent: error: interrupted by {signal_name(stop_signal(exc))}")
            raise
        finally:
            if streamer is not None:
                streamer.close()


def _run_command(
    served_model_name: opt.ServedModelName,
    vllm_url: opt.VllmUrl = "http://127.0.0.1:8000/v1",
    api_key: opt.ApiKey = None,
    vllm_ca: opt.VllmCa = None,
    tokens: opt.Tokens = "auto",
    sampling_override: rl.SamplingOverride = None,
    sampling_defaults: rl.SamplingDefaults = None,
    chat_template: rl.ChatTemplate = None,
    messages_route: rl.MessagesRoute = None,
    responses_route: rl.ResponsesRoute = None,
    experiments_dir: opt.ExperimentsDir = Path("experiments"),
    experiment: opt.Experiment = None,
    log_dir: opt.LogDir = Path("logs"),
    skills_dir: opt.SkillsDir = Path("skills"),
    agent: opt.Agent = None,
    image: opt.Image = None,
    allow_internet: opt.AllowInternet = False,
    task_env: opt.TaskEnv = None,
    openhands_image: opt.OpenhandsImage = None,
    jobs: opt.Jobs = 1,
    ray_address: opt.RayAddress = None,
    rollout_cpus: opt.RolloutCpus = 1.0,
    repeat: opt.Repeat = 1,
    timeout: opt.Timeout = 3600.0,
    max_iterations: opt.MaxIterations = 50,
    temperature: opt.Temperature = None,
    top_p: opt.TopP = None,
    reasoning_effort: opt.ReasoningEffort = None,
    max_output_tokens: opt.MaxOutputTokens = None,
    extra_body: opt.ExtraBody = None,
    llm_timeout: opt.LlmTimeout = 900.0,
    llm_retries: opt.LlmRetries = 0,
    wait_for_llm: opt.WaitForLlm = 600.0,
    resume: opt.Resume = False,
    run_id: opt.RunId = None,
    stream_samples: opt.StreamSamples = None,
    network: opt.Network = None,
    vllm_internal_url: opt.VllmInternalUrl = None,
    entrypoint_script: opt.EntrypointScript = None,
    agent_server_image_repo: opt.AgentServerImageRepo = None,
    agent_server_image_tag: opt.AgentServerImageTag = None,
) -> None:
    """Run experiments in Docker with a headless agent, recording every LLM exchange.

    Exit 0 when every rollout reached a verdict (passed, failed, timeout, agent_error);
    1 when an experiment was skipped as invalid, a rollout is infra_error, the run
    stopped because the LLM server stayed down, or it never answered; 2 for unusable
    input (options, image, an LLM server that refuses the key, the CA or the model
    name); 128 plus the signal's number when a signal stops it: 130 Ctrl-C (SIGINT),
    143 SIGTERM, 129 SIGHUP (see docs/runner.md, "Stopping a run").
    """
    from contagent.cli.run_view import Progress, print_summary
    from contagent.runner.config import (
        LlmOptions,
        RunConfig,
        agent_images,
        new_run_id,
        upstream_base,
    )

    compat = (
        network,
        vllm_internal_url,
        entrypoint_script,
        agent_server_image_repo,
        agent_server_image_tag,
    )
    _note_not_needed(compat)
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
            sampling=rl.sampling_policy(sampling_override, sampling_defaults),
            chat_template=rl.chat_template(chat_template),
            routes=rl.route_modes(messages_route, responses_route),
            llm=LlmOptions(
                served_model_name=served_model_name,
                num_retries=llm_retries,
                timeout_s=llm_timeout,
                reasoning_effort=reasoning_effort,
                temperature=temperature,
                top_p=top_p,
                max_output_tokens=max_output_tokens,
                extra_body=opt.extra_body(extra_body),
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
    progress = Progress(journal)
    summary = run_guarded(lambda: _run(config, progress, journal, stream_samples))
    print_summary(summary, progress, journal)
    end = exit_line(summary)
    if end is not None:
        journal.line(f"contagent: error: {end}")
        fail(end, summary.exit_code)
    journal.line(summary.exit_reason())
    if summary.exit_code:
        raise typer.Exit(summary.exit_code)


def register(app: typer.Typer) -> None:
    app.command("run")(_run_command)
