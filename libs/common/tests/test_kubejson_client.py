"""gpuop_common.kubejson against the simulated API server: paths, CRUD, patch types, status, watch."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from gpuop_common.kubejson import (
    CONFIGMAPS,
    JSON_PATCH,
    NAMESPACES,
    NODES,
    STRATEGIC_MERGE_PATCH,
    KubeJson,
    Resource,
    WatchExpiredError,
    is_status,
)
from kubernetes import client
from kubernetes.client.exceptions import ApiException


def _configmap(name: str, data: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "data": data}


@pytest.fixture
def kube(kube_api_client: client.ApiClient) -> KubeJson:
    return KubeJson(kube_api_client, timeout=5.0)


def test_resource_paths() -> None:
    assert CONFIGMAPS.path("ns", "cm", "status") == "/api/v1/namespaces/ns/configmaps/cm/status"
    assert CONFIGMAPS.path() == "/api/v1/configmaps"
    # A cluster-scoped kind ignores a namespace rather than building a path the server rejects.
    assert NODES.path("ns", "n1") == "/api/v1/nodes/n1"
    widgets = Resource("example.com/v1", "widgets")
    assert widgets.path("ns") == "/apis/example.com/v1/namespaces/ns/widgets"
    assert widgets.kind == "" and widgets.namespaced


def test_create_get_list_fills_kind(kube: KubeJson) -> None:
    created = kube.create(CONFIGMAPS, _configmap("a", {"k": "v"}, {"app": "x"}), "default")
    kube.create(CONFIGMAPS, _configmap("b", {}, {"app": "y"}), "default")

    assert created["metadata"]["uid"]
    assert kube.get(CONFIGMAPS, "a", "default")["data"] == {"k": "v"}
    items, version = kube.list(CONFIGMAPS, "default", labelSelector="app=x", limit=None)
    assert [item["metadata"]["name"] for item in items] == ["a"]
    assert items[0]["kind"] == "ConfigMap" and items[0]["apiVersion"] == "v1"
    assert version.isdigit()


def test_errors_are_api_exceptions_with_status(kube: KubeJson) -> None:
    with pytest.raises(ApiException) as missing:
        kube.get(CONFIGMAPS, "nope", "default")
    assert is_status(missing.value, 404)
    assert not is_status(missing.value, 409, 410)
    assert "nope" in str(missing.value.body)
    assert is_status(WatchExpiredError("configmaps"), 410)
    assert not is_status(ValueError("x"), 404)


def test_patch_kinds_and_replace(kube: KubeJson) -> None:
    kube.create(CONFIGMAPS, _configmap("p", {"a": "1", "b": "2"}), "default")

    merged = kube.patch(CONFIGMAPS, "p", {"data": {"b": None, "c": "3"}}, "default")
    assert merged["data"] == {"a": "1", "c": "3"}
    ops = [{"op": "replace", "path": "/data/a", "value": "9"}]
    assert kube.patch(CONFIGMAPS, "p", ops, "default", content_type=JSON_PATCH)["data"]["a"] == "9"
    strategic = kube.patch(
        CONFIGMAPS, "p", {"data": {"d": "4"}}, "default", content_type=STRATEGIC_MERGE_PATCH
    )
    assert strategic["data"] == {"a": "9", "c": "3", "d": "4"}

    current = kube.get(CONFIGMAPS, "p", "default")
    current["data"] = {"only": "this"}
    assert kube.replace(CONFIGMAPS, "p", current, "default")["data"] == {"only": "this"}


def test_delete_with_uid_precondition(kube: KubeJson) -> None:
    old = kube.create(CONFIGMAPS, _configmap("d", {}), "default")
    kube.delete(CONFIGMAPS, "d", "default")
    kube.create(CONFIGMAPS, _configmap("d", {}), "default")

    # The old uid must not delete the successor that reused the name.
    with pytest.raises(ApiException) as stale:
        kube.delete(CONFIGMAPS, "d", "default", uid=old["metadata"]["uid"])
    assert is_status(stale.value, 409)
    kube.delete(CONFIGMAPS, "d", "default", grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        kube.get(CONFIGMAPS, "d", "default")
    assert is_status(gone.value, 404)


def test_replace_status_only_for_the_same_uid(kube: KubeJson) -> None:
    ns = kube.create(NAMESPACES, {"metadata": {"name": "team"}})
    updated = kube.replace_status(NAMESPACES, ns, {"phase": "Active", "conditions": []})
    assert updated["status"]["phase"] == "Active"

    successor = dict(ns, metadata={**ns["metadata"], "uid": "another-uid"})
    with pytest.raises(ApiException) as mismatch:
        kube.replace_status(NAMESPACES, successor, {"phase": "Terminating"})
    assert is_status(mismatch.value, 422)
    assert kube.get(NAMESPACES, "team")["status"]["phase"] == "Active"


def test_watch_streams_events_from_a_version(kube: KubeJson) -> None:
    _, version = kube.list(CONFIGMAPS, "default")
    kube.create(CONFIGMAPS, _configmap("w", {"n": "1"}), "default")
    kube.patch(CONFIGMAPS, "w", {"data": {"n": "2"}}, "default")
    kube.delete(CONFIGMAPS, "w", "default")

    seen: list[tuple[str, str]] = []
    for event in kube.watch(CONFIGMAPS, "default", version, 5):
        if event["type"] != "BOOKMARK":
            seen.append((event["type"], event["object"]["metadata"]["name"]))
        if len(seen) == 3:
            break
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


def test_watch_from_a_compacted_version_expires(sim_apiserver: Any, kube: KubeJson) -> None:
    _, version = kube.list(CONFIGMAPS, "default")
    for i in range(3):
        kube.create(CONFIGMAPS, _configmap(f"c{i}", {}), "default")
    sim_apiserver.compact(watch_history=True)

    with pytest.raises(WatchExpiredError):
        for _ in kube.watch(CONFIGMAPS, "default", version, 5):
            pass


def test_watch_shut_down_from_another_thread_ends(kube: KubeJson) -> None:
    _, version = kube.list(CONFIGMAPS, "default")
    opened = threading.Event()
    streams: list[Any] = []
    outcome: list[BaseException | None] = []

    def follow() -> None:
        def on_open(response: Any) -> None:
            streams.append(response)
            opened.set()

        try:
            for _ in kube.watch(CONFIGMAPS, "default", version, 30, on_open=on_open):
                pass
            outcome.append(None)
        except Exception as exc:  # a shut-down socket may end the read with an error
            outcome.append(exc)

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    assert opened.wait(5)
    streams[0].shutdown()
    thread.join(5)
    # Well before the 30 s server-side timeout: shutdown() is how callers stop a watch.
    assert not thread.is_alive()
    assert len(outcome) == 1
