"""``contagent proxy``: the recording proxy in the foreground."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from contagent.cli import rl_options as rl
from contagent.cli._common import console, run_guarded
from contagent.errors import ContagentError

#: The client limits' defaults are contagent.proxy.http1.Limits' (a test holds them equal);
#: stated here so that --help shows them without importing the proxy.
_LIMIT = " See docs/proxy.md."


def _proxy(
    upstream: Annotated[
        str, typer.Option("--upstream", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000")
    ],
    record_dir: Annotated[
        Path, typer.Option("--record-dir", help="Where DIR/<rollout_id>/exchanges.jsonl go.")
    ],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 0,
    upstream_api_key_env: Annotated[
        str | None,
        typer.Option(
            help="Environment variable holding the upstream API key (default: none, and "
            "no key goes upstream: the client's own credentials are never forwarded)."
        ),
    ] = None,
    upstream_auth_header: Annotated[
        str,
        typer.Option(
            help="Header that carries the upstream key: Authorization sends 'Bearer KEY' "
            "(vLLM, OpenAI); any other name, e.g. x-api-key, sends the key itself."
        ),
    ] = "Authorization",
    upstream_timeout: Annotated[
        float,
        typer.Option(
            help="Seconds of upstream silence (connecting, then each wait for its bytes) "
            "before giving up: 504, or an error event once the answer started. Long enough "
            "for a long generation's first token; a stream's tokens each restart it."
        ),
    ] = 600.0,
    upstream_ca: Annotated[
        Path | None,
        typer.Option(
            help="PEM file of the CA(s) that sign an https upstream's certificate; "
            "trusted instead of the system's store (the default)."
        ),
    ] = None,
    max_clients: Annotated[
        int, typer.Option(help="Client connections open at once; more get 503." + _LIMIT)
    ] = 1024,
    max_body: Annotated[
        int, typer.Option(help="Request body bytes; larger bodies get 413." + _LIMIT)
    ] = 256 * 1024 * 1024,
    max_target: Annotated[
        int, typer.Option(help="Request-target bytes; longer targets get 414." + _LIMIT)
    ] = 8 * 1024,
    max_head: Annotated[
        int, typer.Option(help="Request line and header bytes; larger heads get 431." + _LIMIT)
    ] = 64 * 1024,
    max_headers: Annotated[
        int, typer.Option(help="Header fields per request; more get 431." + _LIMIT)
    ] = 100,
    head_timeout: Annotated[
        float,
        typer.Option(help="Seconds a client may take to send a request head (408)." + _LIMIT),
    ] = 30.0,
    idle_timeout: Annotated[
        float, typer.Option(help="Seconds an idle client connection is kept open." + _LIMIT)
    ] = 75.0,
    tokens: Annotated[
        str,
        typer.Option(
            help="Record token ids and logprobs of chat completions: auto (when the upstream "
            "is vLLM), on (an error unless it is), off. See docs/tokens.md."
        ),
    ] = "auto",
    sampling_override: rl.SamplingOverride = None,
    sampling_defaults: rl.SamplingDefaults = None,
    chat_template: rl.ChatTemplate = None,
    messages_route: rl.MessagesRoute = None,
    responses_route: rl.ResponsesRoute = None,
    reward_port: Annotated[
        int | None,
        typer.Option(
            help="Serve the reward control route (POST /reward) on this port (0: any free "
            "port), for a harness, never for agents. Default: off. See docs/proxy.md."
        ),
    ] = None,
    reward_host: Annotated[
        str, typer.Option(help="Address the reward control route listens on.")
    ] = "127.0.0.1",
) -> None:
    """Forward /r/<rollout_id>/v1/... to UPSTREAM/v1/... and record every exchange.

    Prints the URL it listens on; stops on SIGINT/SIGTERM after recording the
    requests in flight.

    Exit 0 when a signal stopped it, 2 when it cannot start (an option, the address to
    listen on, the upstream's CA file).
    """
    from contagent.proxy import ProxyOptions, ProxyRunSummary, run_proxy

    def start() -> ProxyRunSummary:
        key = None
        if upstream_api_key_env:
            key = os.environ.get(upstream_api_key_env)
            if not key:
                raise ContagentError(f"environment variable {upstream_api_key_env} is not set")
        if upstream_timeout <= 0:
            raise ContagentError("--upstream-timeout must be positive")
        from contagent.proxy.http1 import Limits

        given: dict[str, Any] = {
            "max_body": max_body, "max_target": max_target, "max_head": max_head,
            "max_headers": max_headers, "head_timeout": head_timeout,
            "idle_timeout": idle_timeout, "max_clients": max_clients,
        }  # fmt: skip
        try:
            limits = Limits(**given)
        except ValueError as exc:
            raise ContagentError(str(exc).replace("limit ", "--").replace("_", "-")) from None
        if record_dir.exists() and not record_dir.is_dir():
            raise ContagentError(f"{record_dir}: not a directory")
        sampling = rl.sampling_policy(sampling_override, sampling_defaults)
        template = rl.chat_template(chat_template)
        routes = rl.route_modes(messages_route, responses_route)
        from contagent.proxy.reward_route import RewardRoute

        reward = None if reward_port is None else RewardRoute(record_dir, reward_host, reward_port)

        def said(line: str) -> None:  # stdout's first line stays the listening URL
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

        def ready(url: str) -> None:
            sys.stdout.write(f"contagent proxy listening on {url} (record dir {record_dir})\n")
            if reward is not None:
                sys.stdout.write(f"reward route on {reward.url}\n")
            sys.stdout.flush()

        options = ProxyOptions(
            host=host,
            port=port,
            upstream_api_key=key,
            upstream_auth_header=upstream_auth_header,
            upstream_timeout=upstream_timeout,
            upstream_ca=upstream_ca,
            limits=limits,
            messages_route=routes[0],
            responses_route=routes[1],
        )
        return run_proxy(
            upstream,
            record_dir,
            options=options,
            tokens_mode=tokens,
            sampling=sampling,
            chat_template=template,
            reward=reward,
            on_tokens=said,
            on_ready=ready,
        )

    summary = run_guarded(start)
    detail = ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items())) or "no exchanges"
    console.print(
        f"contagent proxy stopped: {summary.exchanges} exchanges recorded ({detail})",
        highlight=False,
    )


def _reward(
    rollout_dir: Annotated[
        Path, typer.Argument(help="The rollout's folder: RECORD_DIR/<rollout_id>.")
    ],
    reward: Annotated[float, typer.Option("--reward", help="The rollout's reward.")],
    passed: Annotated[
        bool | None,
        typer.Option("--passed/--failed", help="Whether the attempt passed (default: not said)."),
    ] = None,
    group: Annotated[
        str | None,
        typer.Option(
            help="The attempts it is grouped with, e.g. the task's name (default: not said)."
        ),
    ] = None,
) -> None:
    """Record the reward of a rollout of contagent proxy alone in DIR/reward.json, as the
    proxy's reward route does; a later one replaces it. A rollout of contagent run (with a
    result.json) has its reward from the run and is refused.
    """
    from contagent.rawlog.reward import parse_post, write_reward

    def record() -> str:
        if not rollout_dir.is_dir():
            raise ContagentError(f"{rollout_dir}: not a rollout folder")
        if (rollout_dir / "result.json").exists():
            raise ContagentError(
                f"{rollout_dir}: a contagent run rollout (result.json): its reward is the run's"
            )
        body = {"rollout_id": rollout_dir.resolve().name, "reward": reward}
        body |= {k: v for k, v in (("passed", passed), ("group", group)) if v is not None}
        write_reward(rollout_dir, parse_post(body))
        return f"reward {reward:g} recorded in {rollout_dir / 'reward.json'}"

    console.print(run_guarded(record), highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("proxy")(_proxy)
    app.command("reward")(_reward)
