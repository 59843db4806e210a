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
    """How a :class:`RecordingProxy` listens, forwards and records (each option is described
    there); passed on whole by the functions that start one."""

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
