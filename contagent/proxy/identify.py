"""Which server is upstream, and whether the proxy records token data (``--tokens``).

vLLM is recognised by what it answers: ``GET /v1/models`` lists models
``owned_by: "vllm"`` and ``GET /version`` gives its version. ``--tokens auto``
records token data exactly then; ``on`` insists on it (an error before anything
runs when the upstream is not vLLM); ``off`` never asks. The server found goes
into every request record, whichever the mode.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from typing import Any, Literal, get_args

import aiohttp
import orjson

from contagent.errors import ContagentError

TokensMode = Literal["auto", "on", "off"]
TOKENS_MODES: tuple[str, ...] = get_args(TokensMode)
#: seconds each of the two checks may take
IDENTIFY_TIMEOUT_S = 10.0
#: answers are untrusted input: larger ones are not read
MAX_ANSWER_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class TokenPlan:
    """What the proxy will do: record token data or not, the server it found, and the line
    that says so at start."""

    record: bool
    server: dict[str, Any] | None
    line: str


def _base(upstream: str) -> str:
    base = upstream.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


async def _get(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str], tls: Any
) -> tuple[int, Any]:
    async with session.get(url, headers=headers, ssl=tls, allow_redirects=False) as resp:
        body = await resp.content.read(MAX_ANSWER_BYTES + 1)
    try:
        data = orjson.loads(body) if len(body) <= MAX_ANSWER_BYTES else None
    except orjson.JSONDecodeError:
        data = None
    return resp.status, data


async def _identify(
    base: str, sent: dict[str, str], tls: ssl.SSLContext | None, owners: set[str] | None
) -> tuple[dict[str, Any] | None, str]:
    headers = {"Accept": "application/json", **sent}
    timeout = aiohttp.ClientTimeout(total=IDENTIFY_TIMEOUT_S)
    ssl_arg: Any = tls if tls is not None else True
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
        if owners is None:
            status, models = await _get(session, base + "/v1/models", headers, ssl_arg)
            if status != 200 or not isinstance(models, dict):
                return None, f"GET /v1/models answered {status}, not a model list"
            owners = model_owners(models)
        if "vllm" not in owners:
            named = ", ".join(sorted(str(o) for o in owners)) or "nobody"
            return None, f"its models are owned by {named}, not vllm"
        status, version = await _get(session, base + "/version", headers, ssl_arg)
        if (
            status != 200
            or not isinstance(version, dict)
            or not isinstance(version.get("version"), str)
        ):
            return None, f"its models say vllm, but GET /version answered {status}"
        return {"name": "vllm", "version": version["version"]}, f"vLLM {version['version']}"


def model_owners(listing: Any) -> set[str]:
    """The ``owned_by`` values of an OpenAI model list."""
    items = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(items, list):
        return set()
    return {str(m.get("owned_by")) for m in items if isinstance(m, dict)}


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
    sent = dict(headers) if headers is not None else {}
    if headers is None and api_key:
        sent["Authorization"] = f"Bearer {api_key}"
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(_identify(_base(upstream), sent, tls, owners))
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
        return None, f"no answer ({type(exc).__name__}: {exc})".splitlines()[0][:200]
    finally:
        loop.close()


def plan_tokens(
    mode: str,
    upstream: str,
    api_key: str | None = None,
    tls: ssl.SSLContext | None = None,
    owners: set[str] | None = None,
    headers: dict[str, str] | None = None,
) -> TokenPlan:
    """Resolve ``--tokens``; raises :class:`ContagentError` for ``on`` with an upstream that
    is not vLLM, or an unknown mode."""
    if mode not in TOKENS_MODES:
        raise ContagentError(f"--tokens {mode!r}: use one of {', '.join(TOKENS_MODES)}")
    server, words = identify_server(upstream, api_key, tls, owners, headers)
    if mode == "off":
        return TokenPlan(False, server, "tokens: not recorded (--tokens off)")
    if server is None:
        if mode == "on":
            raise ContagentError(f"--tokens on: the upstream is not vLLM: {words}")
        return TokenPlan(False, None, f"tokens: not recorded (the upstream is not vLLM: {words})")
    return TokenPlan(True, server, f"tokens: recorded (the upstream is {words})")
