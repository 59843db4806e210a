"""Stage 2, Record: the recording proxy that writes the raw exchange log.

Library API (the runner's)::

    from contagent.proxy import start_proxy_in_thread

    with start_proxy_in_thread("http://127.0.0.1:8000", Path("records")) as proxy:
        base_url = proxy.rollout_base_url("rollout-1")   # give this to the agent
        ...

``limits=Limits(...)`` caps what clients may make the proxy hold.
Async code can use :class:`RecordingProxy` directly (``await start()`` /
``await stop()``); ``contagent proxy`` runs :func:`run_proxy`.
"""

from contagent.proxy.http1 import Limits
from contagent.proxy.proxy_options import ProxyOptions
from contagent.proxy.runtime import ProxyRunSummary, RunningProxy, run_proxy, start_proxy_in_thread
from contagent.proxy.server import RecordingProxy

__all__ = [
    "Limits",
    "ProxyOptions",
    "ProxyRunSummary",
    "RecordingProxy",
    "RunningProxy",
    "run_proxy",
    "start_proxy_in_thread",
]
