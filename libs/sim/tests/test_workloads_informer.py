"""Informer: a list+watch cache that stays right across dropped watches and compaction (410)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpuop_sim.apiserver import SimApiServer
from gpuop_sim.workloads.informer import Informer, WorkQueue
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, KubeRest

NS = "default"


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[SimApiServer, KubeRest]]:
    with SimApiServer() as srv:
        srv.write_kubeconfig(tmp_path / "kc")
        rest = KubeRest.from_kubeconfig(tmp_path / "kc")
        yield srv, rest
        rest.close()


def cm(name: str, value: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}}


def test_cache_follows_creates_updates_deletes_and_relists_after_compaction(
    server: tuple[SimApiServer, KubeRest],
) -> None:
    srv, rest = server
    rest.create(CONFIGMAPS, cm("before", "1"), NS)
    informer = Informer(rest, CONFIGMAPS)
    events: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj: events.append((kind, obj["metadata"]["name"])))
    informer.start()
    try:
        assert informer.wait_synced()
        assert informer.get("default/before") is not None
        rest.create(CONFIGMAPS, cm("live", "1"), NS)
        rest.patch(CONFIGMAPS, "live", {"data": {"v": "2"}}, NS)
        eventually(lambda: (informer.get("default/live") or {}).get("data") == {"v": "2"})

        srv.compact()
        srv.faults.drop_watches()
        rest.delete(CONFIGMAPS, "before", NS)  # while the watch is down, then 410 on resume
        rest.create(CONFIGMAPS, cm("after", "1"), NS)
        eventually(
            lambda: informer.get("default/before") is None and informer.get("default/after") is not None
        )
        assert ("DELETED", "before") in events
    finally:
        informer.stop()


def test_own_write_never_resurrects_a_deleted_object(server: tuple[SimApiServer, KubeRest]) -> None:
    _, rest = server
    informer = Informer(rest, CONFIGMAPS)
    deleted: list[str] = []
    informer.add_handler(
        lambda kind, obj: deleted.append(obj["metadata"]["name"]) if kind == "DELETED" else None
    )
    informer.start()
    try:
        assert informer.wait_synced()
        created = rest.create(CONFIGMAPS, cm("gone", "1"), NS)
        rest.delete(CONFIGMAPS, "gone", NS)
        eventually(lambda: "gone" in deleted)
        informer.upsert(created)  # a late record of our own create
        assert informer.get("default/gone") is None
    finally:
        informer.stop()


def test_work_queue_coalesces_keys_and_retries_failures() -> None:
    seen: list[str] = []
    failures = {"flaky": 1}

    def handle(key: str) -> None:
        if failures.get(key):
            failures[key] -= 1
            raise RuntimeError("transient")
        seen.append(key)

    queue = WorkQueue("test", handle)
    queue.start()
    try:
        for key in ("a", "flaky", "a"):
            queue.add(key)
        eventually(lambda: "flaky" in seen and "a" in seen and queue.idle())
        assert seen.count("flaky") == 1
    finally:
        queue.stop()
