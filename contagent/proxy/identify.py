"""Which server is upstream, and whether the proxy records token data (``--tokens``).

vLLM is recognised by what it answers: ``GET /v1/models`` lists models
``owned_by: "vllm"`` and ``GET /version`` gives its version. ``--tokens auto``
records token data exactly then; ``on`` insists on it (an error before anything
runs when the upstream is not vLLM); ``off`` never asks. The server found goes
into every request record, whichever the mode. When token data is recorded, the
server's logprobs mode is probed and its default sampling asked for
(:mod:`contagent.proxy.probe`).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from contagent.errors import ContagentError
from contagent.proxy.probe import (
    LogitsRefused,
    probe_inline_system,
    probe_logprobs_mode,
    probe_thinking_off,
    render_defaults,
)
from contagent.proxy.tokens_mode import check_tokens_mode
from contagent.proxy.upstream_ask import ASK_ERRORS, UpstreamAsk
from contagent.wire import server_root

#: seconds the identifying GETs (``/v1/models``, ``/version``) may take, all together
IDENTIFY_TIMEOUT_S = 10.0
#: seconds the probes may take, all together: they are generations, and a cold or busy
#: server (a CPU build takes 30 s for its first answer) must not read as "not vLLM"
PROBE_TIMEOUT_S = 120.0
#: answers are untrusted input: larger ones are not read
MAX_ANSWER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class TokenPlan:
    """What the proxy will do: record token data or not, the server it found, and the line
    that says so at start."""

    record: bool
    server: dict[str, Any] | None
    line: str
    #: the server's default sampling as it reported it (key -> value), None: not known
    sampling: dict[str, Any] | None = None
    #: the upstream did not answer: ``auto`` may decide again at a later contact
    unanswered: bool = False
    #: more lines to say after ``line``: the logprobs mode and the server's default sampling
    details: tuple[str, ...] = ()


@dataclass
class _Found:
    server: dict[str, Any] | None
    words: str
    model: str | None = None
    answered: bool = True
    #: the model's context length, where the model list was read and gives it
    max_model_len: int | None = None


def _identify(
    ask: UpstreamAsk, base: str, headers: dict[str, str], owners: set[str] | None,
    model: str | None, length: int | None = None,
) -> _Found:  # fmt: skip
    if owners is None or model is None:
        status, models = ask.get(base + "/v1/models", headers, MAX_ANSWER_BYTES)
        if status != 200 or not isinstance(models, dict):
            return _Found(None, f"GET /v1/models answered {status}, not a model list")
        owners = model_owners(models) if owners is None else owners
        model = model or first_model(models)
        length = max_model_len(models, model) if model is not None else None
    if "vllm" not in owners:
        named = ", ".join(sorted(str(o) for o in owners)) or "nobody"
        return _Found(None, f"its models are owned by {named}, not vllm")
    status, version = ask.get(base + "/version", headers, MAX_ANSWER_BYTES)
    if (
        status != 200
        or not isinstance(version, dict)
        or not isinstance(version.get("version"), str)
    ):
        return _Found(None, f"its models say vllm, but GET /version answered {status}")
    found = {"name": "vllm", "version": version["version"]}
    return _Found(found, f"vLLM {version['version']}", model, max_model_len=length)


def first_model(listing: Any) -> str | None:
    """The first model id of an OpenAI model list."""
    for item in _listed(listing):
        if isinstance(item.get("id"), str):
            return str(item["id"])
    return None


def max_model_len(listing: Any, model: str) -> int | None:
    """The context length an OpenAI model list gives ``model`` (vLLM's ``max_model_len``)."""
    for item in _listed(listing):
        if item.get("id") == model:
            length = item.get("max_model_len")
            return length if isinstance(length, int) and not isinstance(length, bool) else None
    return None


def _probe(
    ask: UpstreamAsk, base: str, headers: dict[str, str], found: _Found, template: str | None
) -> tuple[dict[str, Any] | None, list[str]]:
    """Fill ``found.server``'s logprobs mode; (the server's default sampling, the lines)."""
    assert found.server is not None
    if found.model is None:
        found.server.update(logprobs_mode=None, logprobs_mode_how="not probed: no model listed")
        return None, []
    mode, how = probe_logprobs_mode(ask, base, found.model, headers)
    found.server.update(logprobs_mode=mode, logprobs_mode_how=how)
    defaults, said = render_defaults(ask, base, found.model, headers)
    inline, inline_said = probe_inline_system(ask, base, found.model, headers, template)
    if inline is not None:
        found.server["inline_system"] = inline
    effort, effort_said = probe_thinking_off(ask, base, found.model, headers, template)
    if effort is not None:
        found.server["thinking_off_effort"] = effort
    if found.max_model_len is not None:
        found.server["max_model_len"] = found.max_model_len
    lines = [f"logprobs: {mode or 'unknown'} ({how})", f"sampling: {said}"]
    inline_line = f"a system message inside Messages: {inline_said}"
    return defaults, [*lines, inline_line, f"thinking disabled in Messages: {effort_said}"]


def model_owners(listing: Any) -> set[str]:
    """The ``owned_by`` values of an OpenAI model list."""
    return {str(m.get("owned_by")) for m in _listed(listing)}


def _listed(listing: Any) -> list[dict[str, Any]]:
    """The model entries of an OpenAI model list (untrusted: anything else reads as none)."""
    items = listing.get("data") if isinstance(listing, dict) else None
    return [m for m in items if isinstance(m, dict)] if isinstance(items, list) else []


def identify_server(
    upstream: str,
    api_key: str | None = None,
    tls: ssl.SSLContext | None = None,
    owners: set[str] | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[dict[str, Any] | None, str]:
    """``({"name": "vllm", "version": ...}, words)`` for a vLLM upstream, else ``(None, why
    not)``; never raises for what the upstream does (a fresh event loop, this thread).
    ``owners``: the model list's owners when the caller has just read it; ``headers``: the
    credential header to send (else ``api_key`` as a Bearer token)."""
    found, _, _ = _run(upstream, _sent(api_key, headers), tls, owners, None, probe=False)
    return found.server, found.words


def _sent(api_key: str | None, headers: dict[str, str] | None) -> dict[str, str]:
    sent = dict(headers) if headers is not None else {}
    if headers is None and api_key:
        sent["Authorization"] = f"Bearer {api_key}"
    return {"Accept": "application/json", **sent}


def _run(
    upstream: str, headers: dict[str, str], tls: ssl.SSLContext | None,
    owners: set[str] | None, model: str | None, *, probe: bool, template: str | None = None,
    length: int | None = None,
) -> tuple[_Found, dict[str, Any] | None, list[str]]:  # fmt: skip
    base = server_root(upstream)
    try:
        ask = UpstreamAsk(IDENTIFY_TIMEOUT_S, tls)
        found = _identify(ask, base, headers, owners, model, length)
    except ASK_ERRORS as exc:
        return _Found(None, _no_answer(exc), answered=False), None, []
    if not probe or found.server is None:
        return found, None, []
    try:
        ask = UpstreamAsk(PROBE_TIMEOUT_S, tls)
        defaults, lines = _probe(ask, base, headers, found, template)
    except ASK_ERRORS as exc:
        # a vLLM whose probe went unanswered: its mode stays unknown, which the export
        # judges (unknown_logprobs_mode), never "not vLLM"
        how = f"not probed: {_no_answer(exc)}"
        if found.server.get("logprobs_mode") is None:
            found.server.update(logprobs_mode=None, logprobs_mode_how=how)
        return found, None, [f"probes: {how}"]
    return found, defaults, lines


def _no_answer(exc: BaseException) -> str:
    return f"no answer ({type(exc).__name__}: {exc})".splitlines()[0][:200]


def plan_tokens(
    mode: str,
    upstream: str,
    api_key: str | None = None,
    tls: ssl.SSLContext | None = None,
    owners: set[str] | None = None,
    headers: dict[str, str] | None = None,
    model: str | None = None,
    chat_template: str | None = None,
    max_model_len: int | None = None,
) -> TokenPlan:
    """Resolve ``--tokens``; raises :class:`ContagentError` for ``on`` with an upstream that
    is not vLLM or that reports logits, or an unknown mode. ``model``: the model the probe
    asks (else the first one the upstream lists); ``chat_template``: the template the
    proxy sends, which the template probes render with; ``max_model_len``: the model's context
    length where the caller read the model list itself."""
    check_tokens_mode(mode)
    try:
        found, defaults, lines = _run(
            upstream, _sent(api_key, headers), tls, owners, model, probe=mode != "off",
            template=chat_template, length=max_model_len,
        )  # fmt: skip
    except LogitsRefused as exc:
        if mode == "on":
            raise ContagentError(f"--tokens on: {exc}") from None
        return TokenPlan(False, None, f"tokens: not recorded ({exc})")
    server, words = found.server, found.words
    if mode == "off":
        if server is not None:
            server.update(logprobs_mode=None, logprobs_mode_how="not probed: --tokens off")
        return TokenPlan(False, server, "tokens: not recorded (--tokens off)")
    if server is None:
        if mode == "on":
            raise ContagentError(f"--tokens on: the upstream is not vLLM: {words}")
        line = f"tokens: not recorded (the upstream is not vLLM: {words})"
        return TokenPlan(False, None, line, unanswered=not found.answered)
    line = f"tokens: recorded (the upstream is {words})"
    return TokenPlan(True, server, line, defaults, details=tuple(lines))
