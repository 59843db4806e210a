"""The sampling a request really had: ``--sampling-override``, ``--sampling-defaults``, and
the ``sampling`` of its request record.

Each parameter's value comes, in this order, from ``--sampling-override`` (which replaces the
client's), the client's body, ``--sampling-defaults`` (which fills what the client left out),
the server's own default (when the proxy learnt it at start), and is otherwise unknown. Each
value the proxy sets in the forwarded body is listed in ``upstream_changes`` as
``sampling.<key>``; the recorded body stays the client's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from contagent.errors import ContagentError
from contagent.rawlog.records import SAMPLING_KEYS
from contagent.wire import WireApi

#: the keys the options may set (logit_bias is only ever observed)
SETTABLE: tuple[str, ...] = tuple(k for k in SAMPLING_KEYS if k != "logit_bias")
_INTS = frozenset({"top_k", "seed", "max_tokens"})
#: (lowest, highest, lowest included) per key; None: no bound on that side
_RANGES: dict[str, tuple[float | None, float | None, bool]] = {
    "temperature": (0.0, None, True),
    "top_p": (0.0, 1.0, False),
    "top_k": (-1, None, True),
    "min_p": (0.0, 1.0, True),
    "presence_penalty": (-2.0, 2.0, True),
    "frequency_penalty": (-2.0, 2.0, True),
    "repetition_penalty": (0.0, None, False),
    "seed": (None, None, True),
    "max_tokens": (1, None, True),
}


def _fields(api: WireApi) -> dict[str, tuple[str, ...]] | None:
    if api.sampling_fields is None:
        return None
    return {
        k: api.sampling_fields.get(k, (k,))
        for k in SAMPLING_KEYS
        if api.sampling_keys is None or k in api.sampling_keys
    }


#: per API (its adapter's name), the body fields of each key it has; filled on first use
_FIELDS: dict[str, dict[str, tuple[str, ...]] | None] = {}


def sampling_fields(api: WireApi) -> dict[str, tuple[str, ...]] | None:
    """The body fields of each sampling key ``api`` has (the first one set is the client's
    value, the first one is where a set value goes); None: the proxy leaves its sampling be."""
    if api.name not in _FIELDS:
        _FIELDS[api.name] = _fields(api)
    return _FIELDS[api.name]


def parse_sampling(text: str | None, option: str) -> dict[str, float | int]:
    """``k=v,...`` as given to ``option``; raises :class:`ContagentError` with one line."""
    if text is None or not text.strip():
        return {}
    out: dict[str, float | int] = {}
    for item in text.split(","):
        key, eq, raw = item.strip().partition("=")
        key = key.strip()
        if not eq or key not in SETTABLE:
            raise ContagentError(
                f"{option} {item.strip()!r}: use KEY=VALUE with KEY one of {', '.join(SETTABLE)}"
            )
        if key in out:
            raise ContagentError(f"{option}: {key} is given twice")
        out[key] = _value(key, raw.strip(), option)
    return out


def _value(key: str, raw: str, option: str) -> float | int:
    try:
        value: float | int = int(raw) if key in _INTS else float(raw)
    except ValueError:
        kind = "an integer" if key in _INTS else "a number"
        raise ContagentError(f"{option} {key}={raw!r}: not {kind}") from None
    if isinstance(value, float) and not math.isfinite(value):
        raise ContagentError(f"{option} {key}={raw!r}: not a finite number")
    low, high, low_in = _RANGES[key]
    if (low is not None and (value < low or (value == low and not low_in))) or (
        high is not None and value > high
    ):
        side = "at least" if low_in else "above"
        bound = f"{side} {low:g}" if low is not None else ""
        bound += f"{' and ' if bound else ''}at most {high:g}" if high is not None else ""
        raise ContagentError(f"{option} {key}={raw!r}: must be {bound}")
    return value


@dataclass(frozen=True)
class SamplingPolicy:
    """What the proxy does to, and records of, each generation request's sampling."""

    override: Mapping[str, float | int] = field(default_factory=dict)
    defaults: Mapping[str, float | int] = field(default_factory=dict)
    #: the server's own defaults as learnt at start (key -> value), None: not learnt
    server: Mapping[str, Any] | None = None
    #: the server is one whose unset seed and logit_bias mean "none" (vLLM)
    known_server: bool = False

    def learnt(
        self, server: Mapping[str, Any] | None, defaults: Mapping[str, Any] | None
    ) -> SamplingPolicy:
        """This policy with what the server check found: which server it is (``{"name",
        ...}``) and its default sampling."""
        vllm = server is not None and server.get("name") == "vllm"
        return replace(self, server=defaults, known_server=vllm)

    def apply(
        self, body: dict[str, Any], fields: Mapping[str, tuple[str, ...]]
    ) -> tuple[dict[str, Any] | None, list[str], dict[str, Any]]:
        """(the body to send instead, or None when unchanged; the ``upstream_changes`` it
        adds; the request record's ``sampling``) for a request of an API with these
        :func:`sampling_fields`."""
        changed: dict[str, Any] | None = None
        changes: list[str] = []
        record: dict[str, Any] = {}
        for key in SAMPLING_KEYS:
            names = fields.get(key)
            sent = _sent(body, names) if names else None
            if key == "logit_bias":
                record[key] = {"value": bool(sent), "source": "client" if sent else "server"}
                continue
            value, source = self._effective(key, sent, names)
            if names and source in ("override", "defaults") and sent != value:
                changed = changed if changed is not None else dict(body)
                for extra in names[1:]:  # one field carries the value upstream
                    changed.pop(extra, None)
                changed[names[0]] = value
                changes.append(f"sampling.{key}")
            record[key] = None if source is None else {"value": value, "source": source}
        return changed, changes, record

    def _effective(
        self, key: str, sent: Any, names: tuple[str, ...] | None
    ) -> tuple[Any, str | None]:
        if names and key in self.override:
            return self.override[key], "override"
        if sent is not None:
            return sent, "client"
        if names and key in self.defaults:
            return self.defaults[key], "defaults"
        if self.server is not None and key in self.server:
            return self.server[key], "server"
        if key == "seed" and self.known_server:
            return None, "server"
        return None, None


def _sent(body: Mapping[str, Any], names: tuple[str, ...]) -> Any:
    """The client's value for a key (the first of its fields that is set), None if unset."""
    for name in names:
        value = body.get(name)
        if value is not None:
            return value
    return None


def server_defaults(sampling_params: Any) -> dict[str, Any] | None:
    """The server's defaults from a vLLM render answer's ``sampling_params`` (rendered for a
    request that set none); None when it is not such an object. ``max_tokens`` is left out:
    unset, vLLM gives each request the context it has left."""
    if not isinstance(sampling_params, dict):
        return None
    out: dict[str, Any] = {}
    for key in SETTABLE:
        if key == "max_tokens":
            continue
        value = sampling_params.get(key)
        if key == "seed" or _number(value):
            out[key] = value
    return out if "temperature" in out else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
