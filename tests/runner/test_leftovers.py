"""Which leftovers a sweep removes: only this owner's runs whose driver died on this host."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from typing import Any

from contagent.runner import docker_ops
from contagent.runner.stopping import leftovers


@dataclass
class _Obj:
    name: str
    labels: dict[str, str]
    store: list[_Obj] = field(repr=False, default_factory=list)

    @property
    def attrs(self) -> dict[str, Any]:
        return {"Labels": self.labels}

    def remove(self, **_: Any) -> None:
        self.store.remove(self)


class _Kind:
    def __init__(self) -> None:
        self.items: list[_Obj] = []

    def add(self, name: str, labels: dict[str, str]) -> None:
        self.items.append(_Obj(name, labels, self.items))

    def list(self, all: bool = False, filters: dict[str, list[str]] | None = None) -> list[_Obj]:
        wanted = [f.split("=", 1) for f in (filters or {}).get("label", [])]
        return [o for o in list(self.items) if all_match(o.labels, wanted)]


def all_match(labels: dict[str, str], wanted: list[list[str]]) -> bool:
    return all(labels.get(k) == v for k, v in wanted)


class _Client:
    def __init__(self) -> None:
        self.containers, self.networks = _Kind(), _Kind()

    def run(self, rid: str, owner: str, driver: leftovers.Driver | None) -> None:
        labels = {docker_ops.LABEL_OWNER: owner, docker_ops.LABEL_RUN: rid}
        labels |= driver.labels() if driver else {}
        self.containers.add(f"{rid}-runner", labels)
        self.networks.add(rid, labels)


def test_sweep_removes_only_dead_drivers_of_this_owner_on_this_host() -> None:
    me = leftovers.Driver.this_process()
    host = socket.gethostname()
    dead = leftovers.Driver(host, os.getpid(), "1.00")  # a reused pid: another start time
    live = leftovers.Driver(host, me.pid, me.started)
    client = _Client()
    client.run("dead", "me", dead)
    client.run("live", "me", live)
    client.run("far", "me", leftovers.Driver("h2", 7, "5.00"))
    client.run("old", "me", None)
    client.run("theirs", "you", dead)
    done = leftovers.sweep(client, "me", me, tell_live=True)  # type: ignore[arg-type]
    left = {o.labels[docker_ops.LABEL_RUN] for o in client.containers.items}
    assert left == {"live", "far", "old", "theirs"}
    assert {o.labels[docker_ops.LABEL_RUN] for o in client.networks.items} == left
    assert (done.containers, done.networks, done.spared) == (1, 1, ["live"])
    assert done.lines == [
        f"removed leftovers of run dead, whose driver (pid {os.getpid()} on {host}) is gone: "
        "1 container, 1 network",
        "run far: 1 container, 1 network from host h2, not removed from here "
        "(on h2: `contagent gc --run-id far`)",
        f"spared live run live (pid {me.pid}): 1 container, 1 network",
        "run old: 1 container, 1 network without driver labels, not removed "
        "(`contagent gc --run-id old` removes them)",
    ]
    quiet = leftovers.sweep(client, "me", me)  # type: ignore[arg-type]
    assert not any("spared" in line for line in quiet.lines)
