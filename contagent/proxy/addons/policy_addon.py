"""A rollout engine's policy gate (:class:`~contagent.proxy.policy_gate.PolicyGate`) as an
addon: requests are held while the engine is paused, and each record is stamped with the
policy version (the request's when it went upstream, the outcome's when it left)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from contagent.proxy.addons import AddonBase
from contagent.proxy.policy_gate import PolicyGate
from contagent.rawlog.records import with_policy_version

if TYPE_CHECKING:
    from contagent.proxy.proxy_options import ProxyOptions


class PolicyStamp(AddonBase):
    """Admits through the gate, stamps versions, counts what leaves upstream."""

    def __init__(self, gate: PolicyGate) -> None:
        self.gate = gate

    def admit(self, go: Callable[[], None]) -> bool:
        return self.gate.admit(go)

    def stamp(self, record: dict[str, Any]) -> None:
        with_policy_version(record, self.gate.version)

    def left(self) -> int:
        version = self.gate.version  # before a swap can follow the count
        self.gate.ended()
        return version

    def outcome(self, record: dict[str, Any], mark: Any) -> None:
        with_policy_version(record, self.gate.version if mark is None else mark)


def make(options: ProxyOptions) -> PolicyStamp | None:
    return None if options.policy is None else PolicyStamp(options.policy)
