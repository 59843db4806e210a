"""``--sampling-override`` / ``--sampling-defaults``, and the ``sampling`` of every generation
request's record (:mod:`contagent.proxy.sampling_options`): each value set is listed in
``upstream_changes`` as ``sampling.<key>``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contagent.proxy.addons import AddonBase
from contagent.proxy.sampling_options import SamplingPolicy, sampling_fields

if TYPE_CHECKING:
    from contagent.proxy.addons import Flow
    from contagent.proxy.identify import TokenPlan
    from contagent.proxy.proxy_options import ProxyOptions


class SamplingAddon(AddonBase):
    """Sets and records the sampling of each request of an API with sampling fields."""

    def __init__(self, policy: SamplingPolicy) -> None:
        self.policy = policy

    def request(self, flow: Flow) -> None:
        fields = sampling_fields(flow.api)
        if fields is None:
            return
        sent, changes, flow.record["sampling"] = self.policy.apply(flow.body, fields)
        if sent is not None:
            flow.body = sent
        flow.changes.extend(changes)

    def planned(self, plan: TokenPlan) -> None:
        """The server's identity and default sampling, learnt at start."""
        self.policy = self.policy.learnt(plan.server, plan.sampling)


def make(options: ProxyOptions) -> SamplingAddon:
    return SamplingAddon(options.sampling or SamplingPolicy())
