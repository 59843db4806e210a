"""The options ``contagent proxy`` and ``contagent run`` share for RL data: the sampling the
proxy pins or fills in, and the chat template it sends (docs/proxy.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from contagent.errors import ContagentError

if TYPE_CHECKING:
    from contagent.proxy.sampling_options import SamplingPolicy

#: the largest --chat-template file read (templates are a few KB)
MAX_TEMPLATE_BYTES = 1024 * 1024

SamplingOverride = Annotated[
    str | None,
    typer.Option(
        help="Sampling the proxy pins on every generation request, replacing the client's: "
        "KEY=VALUE,... with KEY one of temperature, top_p, top_k, min_p, presence_penalty, "
        "frequency_penalty, repetition_penalty, seed, max_tokens. Default: none pinned. "
        "See docs/proxy.md."
    ),
]
SamplingDefaults = Annotated[
    str | None,
    typer.Option(
        help="Sampling the proxy fills in where the client set none, e.g. "
        "temperature=0.6,top_p=0.95 (keys as --sampling-override). Default: none filled in."
    ),
]
ChatTemplate = Annotated[
    Path | None,
    typer.Option(
        help="A chat template (Jinja) sent with every chat request that has none; vLLM "
        "needs --trust-request-chat-template. Default: none sent (the served model's own). "
        "See docs/tokens.md."
    ),
]

MessagesRoute = Annotated[
    str | None,
    typer.Option(
        help="How a Messages request (Claude Code) goes upstream: native (to the server's "
        "Messages route) or chat (translated to chat completions, where vLLM returns token "
        "ids). Default: chat when tokens are recorded, else native. See docs/proxy.md."
    ),
]
ResponsesRoute = Annotated[
    str | None,
    typer.Option(
        help="How a Responses request (Codex) goes upstream: native or chat, as "
        "--messages-route. Default: chat when tokens are recorded, else native."
    ),
]


def route_modes(messages: str | None, responses: str | None) -> tuple[str | None, str | None]:
    """``--messages-route`` and ``--responses-route`` checked (one-line errors)."""
    from contagent.proxy.token_route import check_route_mode

    return (
        check_route_mode(messages, "--messages-route"),
        check_route_mode(responses, "--responses-route"),
    )


def sampling_policy(override: str | None, defaults: str | None) -> SamplingPolicy:
    """The two options parsed (one-line errors) into a
    :class:`~contagent.proxy.sampling_options.SamplingPolicy`."""
    from contagent.proxy.sampling_options import SamplingPolicy, parse_sampling

    return SamplingPolicy(
        override=parse_sampling(override, "--sampling-override"),
        defaults=parse_sampling(defaults, "--sampling-defaults"),
    )


def chat_template(path: Path | None) -> str | None:
    """The template text of ``--chat-template``, read once (one-line errors)."""
    if path is None:
        return None
    from contagent.textfile import read_text

    named = f"--chat-template {path}"
    text = read_text(path, MAX_TEMPLATE_BYTES, "the template", named)
    if not text.strip():
        raise ContagentError(f"--chat-template {path}: the file is empty")
    return text
