"""vLLM's own weight version and pause, where the server serves them.

vLLM started with ``VLLM_SERVER_DEV_MODE=1`` serves ``GET /weight_info`` (its
``weight_version``, a string), ``POST /update_weight_version``, ``POST /pause``
(``mode=abort`` by default, ``wait`` or ``keep``), ``POST /resume`` and ``GET /is_paused``
(measured on vLLM 0.32's CPU build: docs/engine.md). An engine whose server has them
takes the server's ``weight_version`` as the policy version and pauses the server too,
always in ``wait`` mode: a pause never aborts a request.

Its answers (chat completions and the other wire APIs) carry no version, so the proxies
still stamp each exchange with the engine's int: :class:`PolicyJournal` maps each
``weight_version`` string the server reports to that int, and the log dir keeps the map
(``policy.jsonl``).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from contagent.errors import ContagentError
from contagent.proxy.upstream import tls_context
from contagent.rawlog.policy_journal import PolicyEvent, append_event
from contagent.wire import server_root

#: The server's answer to one control request may take this long (s): a pause in
#: ``wait`` mode returns once the server's own requests ended.
CONTROL_TIMEOUT_S = 600.0


class ServerControl:
    """The dev-mode endpoints of one vLLM server (its base URL, with or without ``/v1``)."""

    def __init__(self, upstream_url: str, api_key: str | None, ca: Path | None) -> None:
        self.base = server_root(upstream_url)
        self._headers = {"Accept": "application/json", "Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._tls: ssl.SSLContext | None = (
            tls_context(ca) if self.base.startswith("https://") else None
        )

    @classmethod
    def probe(cls, upstream_url: str, api_key: str | None, ca: Path | None) -> ServerControl | None:
        """The server's control when ``GET /weight_info`` answers with a version, else None."""
        control = cls(upstream_url, api_key, ca)
        try:
            control.weight_version()
        except ContagentError:
            return None
        return control

    def weight_version(self) -> str:
        answer = self._call("GET", "/weight_info", timeout=10)
        version = answer.get("weight_version") if isinstance(answer, dict) else None
        if not isinstance(version, str):
            raise ContagentError(f"{self.base}/weight_info: no weight_version in {answer!r:.200}")
        return version

    def set_weight_version(self, version: str) -> None:
        self._call("POST", "/update_weight_version", {"new_version": version})

    def pause(self) -> None:
        """Pause the server's scheduling, waiting for its requests to end (``mode=wait``)."""
        self._call("POST", "/pause?mode=wait")

    def resume(self) -> None:
        self._call("POST", "/resume")

    def _call(
        self, method: str, path: str, body: Any = None, timeout: float = CONTROL_TIMEOUT_S
    ) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data, self._headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._tls) as resp:
                return json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise ContagentError(f"{method} {self.base}{path}: {exc.code} {exc.reason}") from None
        except (OSError, ValueError) as exc:
            raise ContagentError(f"{method} {self.base}{path}: {exc}") from None


class PolicyJournal:
    """The engine's policy versions and pauses, appended to its log dir's ``policy.jsonl``
    (:mod:`contagent.rawlog.policy_journal`) as they happen, so the log dir says which
    version each stamped int is and when the proxies held requests.

    It also names the server's ``weight_version`` strings with the engine's ints, in the
    order the engine saw them: the first one is the version the engine starts at; a
    string of digits at or past the current int is that int (so
    ``set_policy_version(v)``'s ``str(v)`` and a trainer that names its weights by step keep
    their numbers); any other new string is the current int plus one."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.names: dict[str, int] = {}

    def version(self, version: int, weight_version: str | None = None) -> None:
        append_event(
            self.log_dir, PolicyEvent.now("version", version=version, weight_version=weight_version)
        )

    def pause(self, in_flight: int) -> None:
        append_event(self.log_dir, PolicyEvent.now("pause", in_flight=in_flight))

    def idle(self, in_flight: int) -> None:
        append_event(self.log_dir, PolicyEvent.now("idle", in_flight=in_flight))

    def resume(self, held: int) -> None:
        append_event(self.log_dir, PolicyEvent.now("resume", held=held))

    def number(self, name: str, current: int) -> int:
        """The int of the server's ``weight_version`` ``name``."""
        if name in self.names:
            return self.names[name]
        if name.isdigit() and int(name) >= current:
            number = int(name)
        else:  # the first name the engine sees is the version it starts at
            number = current + 1 if self.names else current
        self.names[name] = number
        return number
