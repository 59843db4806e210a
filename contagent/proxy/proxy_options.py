"""The recording proxy's options, stated once: :class:`~contagent.proxy.server.RecordingProxy`
takes them whole or as keywords, and each addon reads its own (:mod:`contagent.proxy.addons`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contagent.proxy.http1 import Limits
from contagent.proxy.policy_gate import PolicyGate
from contagent.proxy.sampling_options import SamplingPolicy


@dataclass(frozen=True, kw_only=True)
class ProxyOptions:
    """How a :class:`~contagent.proxy.server.RecordingProxy` listens, forwards and records;
    passed on whole by the functions that start one.

    ``upstream_api_key`` replaces the client's credentials on the way up, in
    ``upstream_auth_header`` (``Authorization``, as ``Bearer <key>``, by default;
    another name, e.g. ``x-api-key``, carries the key itself);
    ``upstream_timeout`` (s) bounds connecting and each wait for upstream bytes
    (504 before the response started, an error event after); None waits forever.
    ``upstream_ca`` (a PEM file) makes an https upstream trusted by its CAs only,
    instead of the system's trust store (which ``SSL_CERT_FILE`` can replace).
    ``stop_grace`` (s) is how long :meth:`stop` lets in-flight exchanges finish
    before cutting them (recorded as ``upstream_error``).

    ``only_rollout`` pins the proxy to one rollout id and ``allowed_clients``
    (a CIDR such as a Docker network's subnet) to the clients it serves: the
    runner gives each rollout its own proxy, and a container of one rollout
    must not be able to write into another rollout's log. Other requests get
    403 and are neither forwarded nor recorded.

    ``limits`` caps what clients may make the proxy hold (:class:`Limits`,
    defaults in docs/proxy.md).

    ``server`` (``{"name", "version"}``) says in every request record which server answered.
    What the proxy changes in a request, and what it takes from a response, is its addons'
    (:mod:`contagent.proxy.addons`), each made from these options: ``tokens`` asks the
    upstream (a vLLM) for token ids and logprobs, records them and hides them from the
    client; ``sampling`` (``--sampling-override``, ``--sampling-defaults``, the server's
    defaults) sets and records each generation request's sampling; ``chat_template`` is sent
    with every request that takes one and carries none.

    ``policy`` (a rollout engine's :class:`~contagent.proxy.policy_gate.PolicyGate`, shared
    by its proxies) stamps each record with the policy version and holds new requests
    while the engine is paused (the policy addon).

    ``messages_route`` and ``responses_route`` (``native`` or ``chat``; None: chat exactly
    when tokens are recorded) say whether a client's Messages or Responses request goes
    upstream as it came or as chat completions, where the server returns token ids
    (:mod:`contagent.proxy.token_route`).
    """

    host: str = "127.0.0.1"
    port: int = 0
    upstream_api_key: str | None = None
    upstream_auth_header: str = "Authorization"
    upstream_timeout: float | None = None
    upstream_ca: Path | None = None
    max_connections: int = 1024
    stop_grace: float = 30.0
    only_rollout: str | None = None
    allowed_clients: str | None = None
    limits: Limits | None = None
    tokens: bool = False
    server: dict[str, Any] | None = None
    sampling: SamplingPolicy | None = None
    chat_template: str | None = None
    policy: PolicyGate | None = None
    #: ``--messages-route`` / ``--responses-route``: native or chat; None: chat exactly
    #: when tokens are recorded (:mod:`contagent.proxy.token_route`)
    messages_route: str | None = None
    responses_route: str | None = None
