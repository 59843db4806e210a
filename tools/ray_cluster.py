"""A Ray cluster of several nodes on this host, for tests and benchmarks (needs ``.[ray]``).

Every node is its own set of processes (GCS, raylet, object store) with its own
ports, all under one private temporary folder, so the cluster never meets another
Ray instance on the host; :meth:`LocalRayCluster.stop` ends exactly its own
processes (``ray stop`` would end every Ray process on the host).
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from typing import Any


def _ray_default_dir() -> str:
    try:
        from ray._common.utils import get_default_ray_temp_dir
    except ImportError:  # older Ray: the same rule
        return os.path.join(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir(), "ray")
    return str(get_default_ray_temp_dir())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalRayCluster:
    """A head node without CPUs (it runs no rollout) and ``workers`` nodes of ``cpus`` CPUs."""

    def __init__(self, workers: int = 2, cpus: float = 1) -> None:
        from ray.cluster_utils import Cluster

        # Short: Ray's socket paths live under it and must fit in 107 bytes.
        self.temp_dir = tempfile.mkdtemp(prefix="ctr-", dir="/tmp")
        # Cluster records the newest cluster's address in Ray's default folder even when the
        # nodes use another, and fails on a host where that folder does not exist yet.
        os.makedirs(_ray_default_dir(), exist_ok=True)
        self._cluster = Cluster(
            initialize_head=True,
            shutdown_at_exit=True,
            head_node_args={
                "num_cpus": 0,
                "gcs_server_port": _free_port(),
                "dashboard_agent_listen_port": _free_port(),
                "include_dashboard": False,
                "temp_dir": self.temp_dir,
            },
        )
        self.workers: list[Any] = []
        for _ in range(workers):
            self.add_worker(cpus)
        self._cluster.wait_for_nodes()

    @property
    def address(self) -> str:
        return str(self._cluster.address)

    def add_worker(self, cpus: float = 1) -> Any:
        node = self._cluster.add_node(num_cpus=cpus, temp_dir=self.temp_dir)
        self.workers.append(node)
        return node

    def node_id(self, node: Any) -> str:
        return str(node.node_id)

    def kill_worker(self, node: Any) -> None:
        """Kill a worker node's processes at once (its raylet included), as a lost machine."""
        self._cluster.remove_node(node, allow_graceful=False)
        self.workers.remove(node)

    def stop(self) -> None:
        self._cluster.shutdown()
        shutil.rmtree(self.temp_dir, ignore_errors=True)
