"""Watch caches against the simulated apiserver: follow changes, resume dropped watches, relist on 410."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
from gpuop_operator.cache import WatchCache
from gpuop_operator.kubeio import CONFIGMAPS, KubeJson
from gpuop_sim.apiserver import SimApiServer
from kubernetes import client


def wait_until(predicate: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.02)


def config_map(name: str, value: str = "1") -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}}


@pytest.fixture
def cache(kube_api_client: client.ApiClient) -> WatchCache:
    changed = threading.Event()
    cache = WatchCache(KubeJson(kube_api_client, timeout=5), CONFIGMAPS, changed.set, namespace="default")
    cache.start()
    assert cache.wait_synced(10)
    yield cache
    cache.stop()


def test_cache_follows_creates_updates_and_deletes(
    cache: WatchCache, kube_api_client: client.ApiClient
) -> None:
    kube = KubeJson(kube_api_client)
    kube.create(CONFIGMAPS, config_map("a"), "default")
    wait_until(lambda: cache.get("default/a") is not None)
    kube.patch(CONFIGMAPS, "a", {"data": {"v": "2"}}, "default")
    wait_until(lambda: (cache.get("default/a") or {}).get("data", {}).get("v") == "2")
    kube.call("DELETE", CONFIGMAPS.path("default", "a"))
    wait_until(lambda: cache.get("default/a") is None)


def test_dropped_watch_resumes_and_410_relists(
    cache: WatchCache, kube_api_client: client.ApiClient, sim_apiserver: SimApiServer
) -> None:
    kube = KubeJson(kube_api_client)
    kube.create(CONFIGMAPS, config_map("before"), "default")
    wait_until(lambda: cache.get("default/before") is not None)
    sim_apiserver.faults.drop_watches("configmaps")
    kube.create(CONFIGMAPS, config_map("after-drop"), "default")
    wait_until(lambda: cache.get("default/after-drop") is not None)
    assert cache.resumes >= 1
    relists = cache.relists
    # The resumed watch is answered 410 Gone, as after an etcd compaction.
    sim_apiserver.faults.fail_next("watch", "configmaps", 410)
    sim_apiserver.faults.drop_watches("configmaps")
    kube.create(CONFIGMAPS, config_map("after-compact"), "default")
    wait_until(lambda: cache.get("default/after-compact") is not None)
    wait_until(lambda: cache.relists > relists)  # the resume got 410 Gone: the cache listed again
    assert {"default/before", "default/after-drop", "default/after-compact"} <= {
        f"default/{c['metadata']['name']}" for c in cache.items()
    }


def test_failed_list_is_retried(kube_api_client: client.ApiClient, sim_apiserver: SimApiServer) -> None:
    sim_apiserver.faults.fail_next("list", "configmaps", 500, count=2)
    cache = WatchCache(
        KubeJson(kube_api_client, timeout=5), CONFIGMAPS, lambda: None, namespace="default", retry_delay=0.05
    )
    cache.start()
    try:
        assert cache.wait_synced(10)
        assert cache.failures == 2
    finally:
        cache.stop()
