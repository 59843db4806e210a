"""Is the LLM server usable? Checked before any container starts, and again mid-run.

The check is what the recording proxy will do for real: ``GET <--vllm-url>/v1/models``
with the same key and the same TLS trust (``--vllm-ca`` or the system store), no
environment proxies, and the answer must list ``--served-model-name``.

Two kinds of failure: the server does not answer (refused, timed out, 5xx: a
server still loading its model, or restarting) is worth waiting for; an answer
that will not change by waiting (TLS verification, 401/403, 404, a model list
without the model) stops at once.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import orjson

from contagent.errors import ContagentError
from contagent.proxy.identify import TokenPlan, max_model_len, model_owners, plan_tokens
from contagent.proxy.upstream import tls_context

MODELS_PATH = "/v1/models"
#: seconds one check may take before it counts as "no answer"
PROBE_TIMEOUT_S = 10.0
#: seconds between checks while waiting
POLL_INTERVAL_S = 2.0
#: the model list is untrusted input: larger answers are not read
MAX_LISTING_BYTES = 4 * 1024 * 1024
#: HTTP statuses that mean "not ready (yet)": overloaded, restarting, behind a gateway
WAITABLE_STATUSES = frozenset({408, 425, 429}) | frozenset(range(500, 600))

#: exit code when the server never answered (run again later), and for an answer that
#: says the options are wrong (key, CA, URL, model name)
EXIT_NOT_ANSWERING = 1
EXIT_UNUSABLE = 2


def _run(coro: Any) -> Any:
    """Run ``coro`` on a fresh event loop without touching signal handlers (``asyncio.run``
    would install its own SIGINT handler for the while, which a Ray driver connected
    earlier does not survive: Ctrl-C then no longer reaches the run)."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


@dataclass(frozen=True)
class Probe:
    """One check's result: ``detail`` says what came back, in a few words."""

    ready: bool
    waitable: bool
    detail: str
    served: tuple[str, ...] = ()
    owners: frozenset[str] = frozenset()  # the listing's owned_by values


class PreflightError(ContagentError):
    """The LLM server is not usable; ``exit_code`` tells waiting-for-it from wrong options."""


def _shown(url: str) -> str:
    """The URL without user info, fit for a message."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, ""))


class LlmServer:
    """The upstream the proxy forwards to, as ``contagent run`` was given it."""

    def __init__(self, upstream_url: str, model: str, api_key: str | None, ca: Path | None) -> None:
        self.url = upstream_url.rstrip("/") + MODELS_PATH
        self.model = model
        self._api_key = api_key
        self.owners: set[str] | None = None  # of the model list, once a check found it ready
        self.max_model_len: int | None = None  # the served model's, as that list gives it
        self._tls: ssl.SSLContext | None = (
            tls_context(ca) if self.url.startswith("https://") else None
        )

    def token_plan(self, mode: str, chat_template: str | None = None) -> TokenPlan:
        """``--tokens`` resolved against this server (raises for ``on`` when it is not vLLM),
        from the model list its last ready check read and ``GET /version``; the template
        probes render with ``chat_template`` (``--chat-template``)."""
        base = self.url.removesuffix(MODELS_PATH)
        return plan_tokens(
            mode, base, self._api_key, self._tls, self.owners, model=self.model,
            chat_template=chat_template, max_model_len=self.max_model_len,
        )  # fmt: skip

    @property
    def tried(self) -> str:
        return f"GET {_shown(self.url)}"

    def probe(self) -> Probe:
        """One check; never raises for what the server does."""
        try:
            status, reason, body = _run(self._get())
        except aiohttp.ClientConnectorCertificateError as exc:
            return Probe(
                False, False, f"TLS error: {_os_reason(exc.certificate_error)} (--vllm-ca?)"
            )
        except aiohttp.ClientSSLError as exc:
            return Probe(False, False, f"TLS error: {_os_reason(exc.os_error)}")
        except aiohttp.ClientConnectorError as exc:
            return Probe(False, True, _os_reason(exc.os_error))
        except TimeoutError:
            return Probe(False, True, f"no answer within {PROBE_TIMEOUT_S:.0f} s")
        except aiohttp.ClientError as exc:  # disconnected, malformed HTTP, payload errors
            return Probe(False, True, f"{type(exc).__name__}: {exc}".splitlines()[0][:200])
        return self._judge(status, reason, body)

    async def _get(self) -> tuple[int, str, bytes]:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        timeout = aiohttp.ClientTimeout(total=PROBE_TIMEOUT_S)
        # trust_env=False: the proxy connects directly, so does the check
        async with (
            aiohttp.ClientSession(timeout=timeout, trust_env=False) as session,
            session.get(
                self.url,
                headers=headers,
                ssl=self._tls if self._tls is not None else True,
                allow_redirects=False,
            ) as resp,
        ):
            body = await resp.content.read(MAX_LISTING_BYTES + 1)
            return resp.status, resp.reason or "", body

    def _judge(self, status: int, reason: str, body: bytes) -> Probe:
        said = f"{status} {reason}".strip()
        if status in (401, 403):
            key = "the key given" if self._api_key else "no key (--api-key / CONTAGENT_API_KEY)"
            return Probe(False, False, f"{said}: the server refused {key}")
        if status in WAITABLE_STATUSES:
            return Probe(False, True, said)
        if status != 200:
            return Probe(False, False, f"{said} (is --vllm-url the server's address?)")
        served = _model_ids(body)
        owners = frozenset(model_owners(orjson.loads(body))) if served is not None else frozenset()
        if served is None:
            return Probe(False, False, f"{said}, but not an OpenAI model list")
        if self.model not in served:
            names = ", ".join(repr(s) for s in served[:20]) or "nothing"
            more = f" and {len(served) - 20} more" if len(served) > 20 else ""
            return Probe(
                False,
                False,
                f"model {self.model!r} (--served-model-name) is not served; it serves {names}{more}",
                served,
            )
        self.owners = set(owners)
        self.max_model_len = max_model_len(orjson.loads(body), self.model)
        return Probe(True, False, "ready", served, owners)


def _os_reason(err: BaseException) -> str:
    if isinstance(err, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {err.verify_message}"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, socket.gaierror):
        return f"host name not resolved ({err.strerror})"
    if isinstance(err, ssl.SSLError):
        return err.reason or str(err)
    if isinstance(err, OSError) and err.strerror:
        return err.strerror
    return str(err) or type(err).__name__


def _model_ids(body: bytes) -> tuple[str, ...] | None:
    if len(body) > MAX_LISTING_BYTES:
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    return tuple(str(m["id"]) for m in items if isinstance(m, dict) and "id" in m)


def wait_until_ready(
    server: LlmServer,
    wait_s: float,
    on_status: Callable[[str], None],
    *,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> float:
    """Check until the server is ready; the seconds it took. Raises :class:`PreflightError`.

    A server that does not answer is checked again every ``POLL_INTERVAL_S`` for up to
    ``wait_s`` seconds (0: one check), with ``on_status`` told each time.
    """
    start = clock()
    while True:
        probe = server.probe()
        waited = clock() - start
        if probe.ready:
            return waited
        if not probe.waitable:
            raise PreflightError(
                f"LLM server: {server.tried}: {probe.detail}", exit_code=EXIT_UNUSABLE
            )
        left = wait_s - waited
        if left <= 0:
            limit = "" if wait_s <= 0 else f" within --wait-for-llm {wait_s:g} s"
            raise PreflightError(
                f"LLM server not ready{limit}: {server.tried}: {probe.detail}",
                exit_code=EXIT_NOT_ANSWERING,
            )
        on_status(
            f"waiting for the LLM server: {server.tried}: {probe.detail} "
            f"({waited:.0f} s of --wait-for-llm {wait_s:g} s)"
        )
        sleep(min(POLL_INTERVAL_S, left))
