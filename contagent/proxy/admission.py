"""Which requests the recording proxy takes, decided before anything is recorded: the
``/r/<rollout_id>/`` path, the rollout a single-rollout proxy records, the client's address
and a rollout id that is safe as a folder name. A refused request gets one error in the
shape of the API its path names."""

from __future__ import annotations

import ipaddress
from collections.abc import Container
from dataclasses import dataclass

from contagent import wire
from contagent.errors import ContagentError
from contagent.layout import safe_segment
from contagent.wire import WireApi

Network = ipaddress.IPv4Network | ipaddress.IPv6Network

#: the proxy's type of each status it refuses a request with (the OpenAI shape's ``type``)
DENIALS = {400: "invalid_request_error", 403: "permission_error", 404: "not_found"}


@dataclass(frozen=True)
class Denial:
    """A request refused before it is recorded."""

    status: int
    message: str

    @property
    def kind(self) -> str:
        return DENIALS[self.status]


@dataclass(frozen=True)
class Admitted:
    """A request to forward: its rollout and the path after ``/r/<rollout_id>``."""

    rollout_id: str
    path: bytes


def client_api(target: bytes) -> WireApi:
    """The wire API of a request's target (a path with query), whose shape the proxy's own
    errors to its client take."""
    return wire.error_api(target.decode("latin-1"))


def _client_in(remote: str | None, network: Network) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote) in network
    except ValueError:
        return False


def admit(
    target: bytes,
    peer: str | None,
    only_rollout: str | None,
    clients: Network | None,
    known: Container[str],
) -> Admitted | Denial:
    """Whether the proxy takes a request for ``target`` from ``peer``; ``known``: rollout ids
    already recorded (checked once, when first seen)."""
    if not target.startswith(b"/r/"):
        return Denial(404, "use /r/<rollout_id>/v1/... (see contagent proxy --help)")
    rid, sep, tail = target[3:].partition(b"/")
    rollout_id = rid.decode("latin-1")
    if not sep:
        return Denial(404, "nothing to forward: use /r/<rollout_id>/v1/...")
    if only_rollout is not None and rollout_id != only_rollout:
        return Denial(403, "this proxy records another rollout")
    if clients is not None and not _client_in(peer, clients):
        return Denial(403, "this proxy does not serve your address")
    if rollout_id not in known:
        try:
            safe_segment(rollout_id, "rollout id")
        except ContagentError as exc:
            return Denial(400, str(exc))
    return Admitted(rollout_id, b"/" + tail)
