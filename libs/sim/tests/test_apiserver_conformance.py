"""The simulator through the real `kubernetes` client: each behaviour a controller relies on."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import urllib3
from gpuop_sim.apiserver import SimApiServer
from kubernetes import client, watch
from kubernetes.client.rest import ApiException

WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.gpuop.dev"},
    "spec": {
        "group": "example.gpuop.dev",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wdg"]},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["size"],
                                "properties": {
                                    "size": {"type": "integer", "minimum": 1},
                                    "color": {"type": "string", "enum": ["red", "blue"], "default": "red"},
                                },
                            },
                            "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
                        },
                    }
                },
            }
        ],
    },
}
GROUP, VERSION, PLURAL = "example.gpuop.dev", "v1", "widgets"


def wait_for(condition: Callable[[], Any], timeout: float = 5.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def status_of(call: Callable[[], Any]) -> int:
    with pytest.raises(ApiException) as info:
        call()
    return int(info.value.status)


@pytest.fixture
def core(kube_api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api_client)


@pytest.fixture
def apps(kube_api_client: client.ApiClient) -> client.AppsV1Api:
    return client.AppsV1Api(kube_api_client)


@pytest.fixture
def custom(kube_api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_api_client)


@pytest.fixture
def widgets(kube_api_client: client.ApiClient, custom: client.CustomObjectsApi) -> client.CustomObjectsApi:
    ext = client.ApiextensionsV1Api(kube_api_client)
    ext.create_custom_resource_definition(WIDGET_CRD)

    def established() -> bool:
        crd = ext.read_custom_resource_definition("widgets.example.gpuop.dev")
        return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])

    wait_for(established, what="Widget CRD Established")
    return custom


def widget(name: str, size: int = 1, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Widget",
        "metadata": {"name": name, "labels": labels},
        "spec": {"size": size},
    }


def cm(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}


# ------------------------------------------------------------------ CRUD and conflicts
def test_configmap_crud_and_error_codes(core: client.CoreV1Api) -> None:
    created = core.create_namespaced_config_map("default", cm("a"))
    assert created.metadata.uid and created.metadata.resource_version and created.metadata.creation_timestamp
    assert core.read_namespaced_config_map("a", "default").data == {"k": "v"}
    assert status_of(lambda: core.create_namespaced_config_map("default", cm("a"))) == 409
    created.data = {"k": "v2"}
    replaced = core.replace_namespaced_config_map("a", "default", created)
    assert int(replaced.metadata.resource_version) > int(created.metadata.resource_version)
    created.data = {"k": "stale"}
    assert status_of(lambda: core.replace_namespaced_config_map("a", "default", created)) == 409
    core.delete_namespaced_config_map("a", "default")
    assert status_of(lambda: core.read_namespaced_config_map("a", "default")) == 404
    assert status_of(lambda: core.create_namespaced_config_map("nope", cm("b"))) == 404


def test_node_admission_and_generation(core: client.CoreV1Api, apps: client.AppsV1Api) -> None:
    node = core.create_node({"metadata": {"name": "n1"}})
    assert [(t.key, t.effect) for t in node.spec.taints] == [("node.kubernetes.io/not-ready", "NoSchedule")]
    ns = core.read_namespace("default")
    assert ns.metadata.labels["kubernetes.io/metadata.name"] == "default"
    ds = apps.create_namespaced_daemon_set(
        "default",
        {
            "metadata": {"name": "ds"},
            "spec": {
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [{"name": "c", "image": "x:1"}]},
                },
            },
        },
    )
    assert ds.metadata.generation == 1
    assert ds.metadata.annotations["deprecated.daemonset.template.generation"] == "1"
    assert ds.spec.update_strategy.rolling_update.max_unavailable == 1
    patched = apps.patch_namespaced_daemon_set("ds", "default", {"metadata": {"labels": {"x": "y"}}})
    assert patched.metadata.generation == 1
    patched = apps.patch_namespaced_daemon_set(
        "ds", "default", {"spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x:2"}]}}}}
    )
    assert patched.metadata.generation == 2
    assert patched.metadata.annotations["deprecated.daemonset.template.generation"] == "2"


# ------------------------------------------------------------------ patches
def test_strategic_merge_patch_merges_lists_by_key(apps: client.AppsV1Api) -> None:
    containers = [
        {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
        {"name": "b", "image": "b:1"},
    ]
    body = {
        "metadata": {"name": "d"},
        "spec": {
            "selector": {"matchLabels": {"a": "d"}},
            "template": {"metadata": {"labels": {"a": "d"}}, "spec": {"containers": containers}},
        },
    }
    apps.create_namespaced_daemon_set("default", body)
    patch = {
        "spec": {"template": {"spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "3"}]}]}}}
    }
    ds = apps.patch_namespaced_daemon_set("d", "default", patch)
    got = {c.name: c for c in ds.spec.template.spec.containers}
    assert got["a"].image == "a:1" and got["b"].image == "b:1"
    assert {e.name: e.value for e in got["a"].env} == {"X": "1", "Y": "3"}
    delete = {"spec": {"template": {"spec": {"containers": [{"name": "b", "$patch": "delete"}]}}}}
    ds = apps.patch_namespaced_daemon_set("d", "default", delete)
    assert [c.name for c in ds.spec.template.spec.containers] == ["a"]


def test_merge_json_and_apply_patches(core: client.CoreV1Api, custom: client.CustomObjectsApi) -> None:
    core.create_node({"metadata": {"name": "p1", "labels": {"keep": "1", "drop": "1"}}})
    node = core.patch_node("p1", {"metadata": {"labels": {"drop": None, "new": "1"}}})
    assert node.metadata.labels == {"keep": "1", "new": "1"}
    node = core.patch_node("p1", [{"op": "add", "path": "/metadata/labels/gpuop.dev~1x", "value": "y"}])
    assert node.metadata.labels["gpuop.dev/x"] == "y"
    failing = [
        {"op": "test", "path": "/metadata/labels/keep", "value": "2"},
        {"op": "remove", "path": "/metadata/labels/keep"},
    ]
    assert status_of(lambda: core.patch_node("p1", failing)) == 422
    stale = {"metadata": {"resourceVersion": "1", "labels": {"a": "b"}}}
    assert status_of(lambda: core.patch_node("p1", stale)) == 409

    def apply_as(manager: str, value: str, force: bool = False) -> Any:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"a": value}}
        return core.patch_namespaced_config_map(
            "ssa",
            "default",
            body,
            field_manager=manager,
            force=force,
            _content_type="application/apply-patch+yaml",
        )

    applied = apply_as("op-a", "1")
    assert applied.data == {"a": "1"}
    assert [(m.manager, m.operation) for m in applied.metadata.managed_fields] == [("op-a", "Apply")]
    assert status_of(lambda: apply_as("op-b", "2")) == 409
    assert apply_as("op-b", "2", force=True).data == {"a": "2"}


def test_smp_on_custom_resource_is_415(widgets: client.CustomObjectsApi) -> None:
    widgets.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, widget("w"))
    smp = "application/strategic-merge-patch+json"

    def patch() -> Any:
        return widgets.patch_namespaced_custom_object(
            GROUP, VERSION, "default", PLURAL, "w", {"spec": {"size": 2}}, _content_type=smp
        )

    assert status_of(patch) == 415


# ------------------------------------------------------------------ selectors and paging
def test_label_and_field_selectors(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "sel"}})
    core.create_namespaced_config_map("sel", cm("gpu-a", tier="gpu", vendor="amd"))
    core.create_namespaced_config_map("sel", cm("gpu-b", tier="gpu", vendor="nvidia"))
    core.create_namespaced_config_map("sel", cm("cpu-c", tier="cpu"))
    core.create_namespaced_config_map("sel", cm("plain"))

    def names(**kw: str) -> list[str]:
        items = core.list_namespaced_config_map("sel", **kw).items
        return [i.metadata.name for i in items if i.metadata.name != "kube-root-ca.crt"]

    assert names(label_selector="tier=gpu") == ["gpu-a", "gpu-b"]
    assert names(label_selector="tier==gpu,vendor!=nvidia") == ["gpu-a"]
    assert names(label_selector="tier!=gpu") == ["cpu-c", "plain"]
    assert names(label_selector="vendor in (amd,intel)") == ["gpu-a"]
    assert names(label_selector="tier notin (gpu)") == ["cpu-c", "plain"]
    assert names(label_selector="tier") == ["cpu-c", "gpu-a", "gpu-b"]
    assert names(label_selector="!tier") == ["plain"]
    assert names(field_selector="metadata.name=gpu-b") == ["gpu-b"]
    assert status_of(lambda: names(label_selector="tier in gpu")) == 400
    assert status_of(lambda: names(field_selector="data.k=v")) == 400


def test_pod_field_selectors_binding_and_defaults(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "work"}})
    wait_for(lambda: core.list_namespaced_service_account("work").items, what="default ServiceAccount")
    spec = {
        "containers": [{"name": "c", "image": "busybox:1", "resources": {"limits": {"amd.com/gpu": "2"}}}]
    }
    pod = core.create_namespaced_pod("work", {"metadata": {"name": "p"}, "spec": spec})
    assert pod.status.phase == "Pending" and pod.spec.service_account_name == "default"
    assert pod.spec.containers[0].resources.requests == {"amd.com/gpu": "2"}
    core.create_namespaced_pod_binding(
        "p",
        "work",
        {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n9"}},
        _preload_content=False,
    )
    assert [
        p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector="spec.nodeName=n9").items
    ] == ["p"]
    assert core.list_namespaced_pod("work", field_selector="status.phase=Running").items == []
    bad = {
        "containers": [{"name": "c", "image": "busybox:1", "resources": {"requests": {"amd.com/gpu": "1"}}}]
    }
    assert (
        status_of(lambda: core.create_namespaced_pod("work", {"metadata": {"name": "q"}, "spec": bad})) == 422
    )


def test_pod_qos_class_is_set_at_create_and_immutable(core: client.CoreV1Api) -> None:
    """The real server computes status.qosClass at create and refuses any status write that changes
    it (`status.qosClass: Invalid value: "BestEffort": field is immutable`), a kubelet's included."""
    core.create_namespace({"metadata": {"name": "qos"}})
    spec = {"containers": [{"name": "c", "image": "busybox:1", "resources": {"requests": {"cpu": "10m"}}}]}
    pod = core.create_namespaced_pod("qos", {"metadata": {"name": "p"}, "spec": spec})
    assert pod.status.qos_class == "Burstable"
    refused = {"status": {"qosClass": "BestEffort", "phase": "Running"}}
    with pytest.raises(ApiException) as error:
        core.patch_namespaced_pod_status("p", "qos", refused)
    assert error.value.status == 422
    message = json.loads(error.value.body)["message"]
    assert message == 'Pod "p" is invalid: status.qosClass: Invalid value: "BestEffort": field is immutable'
    kept = core.patch_namespaced_pod_status("p", "qos", {"status": {"phase": "Running"}})
    assert (kept.status.qos_class, kept.status.phase) == ("Burstable", "Running")


def test_token_request_for_a_service_account(core: client.CoreV1Api) -> None:
    """What the kubelet asks for each pod's projected token; an unknown ServiceAccount is 404."""
    core.create_namespace({"metadata": {"name": "tok"}})
    wait_for(lambda: core.list_namespaced_service_account("tok").items, what="default ServiceAccount")
    body = {
        "spec": {
            "expirationSeconds": 3607,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1"},
        }
    }
    answer = core.create_namespaced_service_account_token("default", "tok", body)
    assert answer.status.token and answer.status.expiration_timestamp
    assert answer.spec.audiences == ["https://kubernetes.default.svc.cluster.local"]
    assert status_of(lambda: core.create_namespaced_service_account_token("nobody", "tok", body)) == 404


def test_limit_and_continue(core: client.CoreV1Api) -> None:
    for i in range(5):
        core.create_namespaced_config_map("default", cm(f"page-{i}", page="yes"))
    first = core.list_namespaced_config_map("default", label_selector="page=yes", limit=2)
    assert [i.metadata.name for i in first.items] == ["page-0", "page-1"]
    core.create_namespaced_config_map("default", cm("page-9", page="yes"))
    rest = core.list_namespaced_config_map(
        "default", label_selector="page=yes", limit=10, _continue=first.metadata._continue
    )
    assert [i.metadata.name for i in rest.items] == [
        "page-2",
        "page-3",
        "page-4",
    ]  # snapshot of the first page


# ------------------------------------------------------------------ watch
def test_watch_events_resume_and_selector_transitions(core: client.CoreV1Api) -> None:
    start = core.list_namespaced_config_map("default").metadata.resource_version
    core.create_namespaced_config_map("default", cm("w", gpu="yes"))
    core.patch_namespaced_config_map("w", "default", {"data": {"k": "2"}})
    core.patch_namespaced_config_map("w", "default", {"metadata": {"labels": {"gpu": "no"}}})
    core.delete_namespaced_config_map("w", "default")
    events = [
        (e["type"], e["object"].metadata.name)
        for e in watch.Watch().stream(
            core.list_namespaced_config_map, "default", resource_version=start, timeout_seconds=1
        )
    ]
    assert events == [("ADDED", "w"), ("MODIFIED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]
    selected = [
        e["type"]
        for e in watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=start,
            label_selector="gpu=yes",
            timeout_seconds=1,
        )
    ]
    assert selected == ["ADDED", "MODIFIED", "DELETED"]  # relabel out of the selector is a DELETED


def test_watch_too_old_resource_version_is_410() -> None:
    with SimApiServer(controllers=False, history_limit=3) as srv:
        api = client.ApiClient(client.Configuration(host=srv.url))
        core = client.CoreV1Api(api)
        old = core.list_namespaced_config_map("default").metadata.resource_version
        for i in range(5):
            core.create_namespaced_config_map("default", cm(f"h{i}"))
        with pytest.raises(ApiException) as info:
            list(
                watch.Watch().stream(
                    core.list_namespaced_config_map, "default", resource_version=old, timeout_seconds=1
                )
            )
        assert info.value.status == 410
        assert (
            status_of(
                lambda: core.list_namespaced_config_map(
                    "default", resource_version=old, resource_version_match="Exact"
                )
            )
            == 410
        )
        api.close()


def test_watch_bookmarks_and_initial_events() -> None:
    with SimApiServer(controllers=False, bookmark_interval=0.2) as srv:
        api = client.ApiClient(client.Configuration(host=srv.url))
        core = client.CoreV1Api(api)
        rv = core.list_namespaced_config_map("default").metadata.resource_version
        core.create_namespaced_config_map("default", cm("bm"))
        resp = core.list_namespaced_config_map(
            "default",
            watch=True,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
            _preload_content=False,
        )
        types = [line for line in resp.read().decode().splitlines() if line]
        assert '"type":"ADDED"' in types[0] and any('"type":"BOOKMARK"' in t for t in types[1:])
        resp = core.list_namespaced_config_map(
            "default",
            watch=True,
            send_initial_events=True,
            resource_version_match="NotOlderThan",
            allow_watch_bookmarks=True,
            timeout_seconds=1,
            _preload_content=False,
        )
        lines = [line for line in resp.read().decode().splitlines() if line]
        assert '"name":"bm"' in lines[0] and "k8s.io/initial-events-end" in lines[1]
        api.close()


# ------------------------------------------------------------------ status, finalizers, controllers
def test_status_subresource_isolation(core: client.CoreV1Api, widgets: client.CustomObjectsApi) -> None:
    core.create_node({"metadata": {"name": "s1"}})
    node = core.patch_node_status(
        "s1", {"status": {"capacity": {"amd.com/gpu": "8"}}, "metadata": {"labels": {"x": "y"}}}
    )
    assert node.status.capacity == {"amd.com/gpu": "8"} and node.status.allocatable == {"amd.com/gpu": "8"}
    assert not node.metadata.labels
    node = core.patch_node("s1", {"status": {"capacity": {"amd.com/gpu": "1"}}})
    assert node.status.capacity == {"amd.com/gpu": "8"}
    widgets.create_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, {**widget("st"), "status": {"phase": "X"}}
    )
    obj = widgets.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "st")
    assert "status" not in obj and obj["spec"]["color"] == "red"  # dropped on create; schema default applied
    obj = widgets.patch_namespaced_custom_object_status(
        GROUP, VERSION, "default", PLURAL, "st", {"status": {"phase": "Ready"}, "spec": {"size": 9}}
    )
    assert (
        obj["status"] == {"phase": "Ready"}
        and obj["spec"]["size"] == 1
        and obj["metadata"]["generation"] == 1
    )
    obj = widgets.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "st", {"spec": {"size": 2}}
    )
    assert obj["metadata"]["generation"] == 2 and obj["status"] == {"phase": "Ready"}


def test_finalizers_hold_deletion(widgets: client.CustomObjectsApi) -> None:
    body = widget("f")
    body["metadata"]["finalizers"] = ["example.gpuop.dev/hold"]
    widgets.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    held = widgets.delete_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "f")
    assert held["metadata"]["deletionTimestamp"]
    assert widgets.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "f")["metadata"][
        "deletionTimestamp"
    ]
    widgets.patch_namespaced_custom_object(
        GROUP, VERSION, "default", PLURAL, "f", {"metadata": {"finalizers": None}}
    )
    assert (
        status_of(lambda: widgets.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, "f")) == 404
    )


def test_garbage_collection_and_namespace_controllers(core: client.CoreV1Api) -> None:
    owner = core.create_namespaced_config_map("default", cm("owner"))
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    core.create_namespaced_config_map("default", {"metadata": {"name": "child", "ownerReferences": [ref]}})
    core.delete_namespaced_config_map("owner", "default")

    def child_gone() -> bool:
        return not [c for c in core.list_namespaced_config_map("default").items if c.metadata.name == "child"]

    wait_for(child_gone, what="dependent garbage-collected")
    core.create_namespace({"metadata": {"name": "doomed"}})
    wait_for(lambda: core.list_namespaced_service_account("doomed").items, what="default ServiceAccount")
    core.create_namespaced_config_map("doomed", cm("x"))
    core.delete_namespace("doomed")
    wait_for(
        lambda: "doomed" not in [n.metadata.name for n in core.list_namespace().items],
        what="namespace removed",
    )


def test_a_dependent_created_after_its_owner_was_deleted_is_collected(core: client.CoreV1Api) -> None:
    """A controller on a stale cache writes a pod for a DaemonSet already gone: the real garbage
    collector finds the absent owner and deletes the dependent; one with a live owner left only
    loses the absent reference."""
    owner = core.create_namespaced_config_map("default", cm("gone-owner"))
    keeper = core.create_namespaced_config_map("default", cm("live-owner"))
    gone = {"apiVersion": "v1", "kind": "ConfigMap", "name": "gone-owner", "uid": owner.metadata.uid}
    live = {"apiVersion": "v1", "kind": "ConfigMap", "name": "live-owner", "uid": keeper.metadata.uid}
    core.delete_namespaced_config_map("gone-owner", "default")
    core.create_namespaced_config_map("default", {"metadata": {"name": "late", "ownerReferences": [gone]}})
    core.create_namespaced_config_map(
        "default", {"metadata": {"name": "both", "ownerReferences": [gone, live]}}
    )
    # An owner of the same name but another uid is not the owner.
    core.create_namespaced_config_map("default", cm("gone-owner"))
    names = lambda: {c.metadata.name for c in core.list_namespaced_config_map("default").items}  # noqa: E731
    wait_for(lambda: "late" not in names(), what="dangling dependent garbage-collected")
    wait_for(
        lambda: (
            [r.uid for r in core.read_namespaced_config_map("both", "default").metadata.owner_references]
            == [keeper.metadata.uid]
        ),
        what="absent owner reference removed",
    )
    for name in ("both", "live-owner", "gone-owner"):
        core.delete_namespaced_config_map(name, "default")


def test_bare_apiserver_does_not_collect_garbage() -> None:
    with SimApiServer(controllers=False) as srv:
        api = client.ApiClient(client.Configuration(host=srv.url))
        core = client.CoreV1Api(api)
        owner = core.create_namespaced_config_map("default", cm("owner"))
        ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
        core.create_namespaced_config_map(
            "default", {"metadata": {"name": "child", "ownerReferences": [ref]}}
        )
        core.delete_namespaced_config_map("owner", "default")
        assert core.read_namespaced_config_map("child", "default").metadata.name == "child"
        assert core.list_namespaced_service_account("default").items == []
        api.close()


# ------------------------------------------------------------------ CRDs, discovery, events, leases
def test_crd_registration_and_schema_validation(
    kube_api_client: client.ApiClient, widgets: client.CustomObjectsApi
) -> None:
    assert (
        status_of(
            lambda: widgets.create_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL, widget("bad", size=0)
            )
        )
        == 422
    )
    body = widget("ok", size=3)
    body["spec"]["unknown"] = True
    created = widgets.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
    assert created["spec"] == {"size": 3, "color": "red"}  # pruned and defaulted
    resources = client.CustomObjectsApi(kube_api_client).get_api_resources(GROUP, VERSION)
    assert {r.name for r in resources.resources} == {"widgets", "widgets/status"}
    client.ApiextensionsV1Api(kube_api_client).delete_custom_resource_definition("widgets.example.gpuop.dev")
    wait_for(
        lambda: (
            status_of(lambda: widgets.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)) == 404
        ),
        what="Widget resource unregistered",
    )


def test_discovery(kube_api_client: client.ApiClient) -> None:
    assert client.VersionApi(kube_api_client).get_code().git_version == "v1.36.2"
    assert client.CoreApi(kube_api_client).get_api_versions().versions == ["v1"]
    groups = {g.name for g in client.ApisApi(kube_api_client).get_api_versions().groups}
    assert {"apps", "batch", "coordination.k8s.io", "apiextensions.k8s.io", "resource.k8s.io"} <= groups
    names = {r.name for r in client.CoreV1Api(kube_api_client).get_api_resources().resources}
    assert {"nodes", "nodes/status", "pods/eviction", "pods/binding", "configmaps", "events"} <= names


def test_events_in_both_apis(kube_api_client: client.ApiClient, core: client.CoreV1Api) -> None:
    when = dt.datetime(2025, 1, 1, 0, 0, 0, 500000, tzinfo=dt.UTC)
    client.EventsV1Api(kube_api_client).create_namespaced_event(
        "default",
        {
            "metadata": {"name": "e1"},
            "eventTime": when,
            "reportingController": "gpuop.dev/operator",
            "reportingInstance": "op-0",
            "action": "Remediate",
            "regarding": {"kind": "Node", "name": "n1"},
            "reason": "GPUUnhealthy",
            "note": "xgmi",
            "type": "Warning",
        },
    )
    ev = core.read_namespaced_event("e1", "default")
    assert (
        ev.message == "xgmi"
        and ev.involved_object.name == "n1"
        and ev.reporting_component == "gpuop.dev/operator"
    )
    assert [
        e.metadata.name
        for e in core.list_namespaced_event("default", field_selector="involvedObject.name=n1").items
    ] == ["e1"]


def test_lease_optimistic_concurrency(kube_api_client: client.ApiClient) -> None:
    leases = client.CoordinationV1Api(kube_api_client)
    when = dt.datetime(2025, 1, 1, 0, 0, 0, 123456, tzinfo=dt.UTC)
    spec = {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": when, "renewTime": when}
    lease = leases.create_namespaced_lease("default", {"metadata": {"name": "leader"}, "spec": spec})
    assert lease.spec.renew_time == when
    lease.spec.holder_identity = "b"
    leases.replace_namespaced_lease("leader", "default", lease)
    lease.spec.holder_identity = "c"
    assert status_of(lambda: leases.replace_namespaced_lease("leader", "default", lease)) == 409


def test_dry_run_and_delete_collection(core: client.CoreV1Api) -> None:
    dry = core.create_namespaced_config_map("default", cm("dry"), dry_run="All")
    assert dry.metadata.uid and status_of(lambda: core.read_namespaced_config_map("dry", "default")) == 404
    for name in ("x1", "x2", "keep"):
        core.create_namespaced_config_map("default", cm(name, drop="yes" if name != "keep" else "no"))
    core.delete_collection_namespaced_config_map("default", label_selector="drop=yes")
    assert [
        c.metadata.name for c in core.list_namespaced_config_map("default", label_selector="drop").items
    ] == ["keep"]


# ------------------------------------------------------------------ fault injection
def test_fail_next_latency_and_stats(sim_apiserver: SimApiServer, core: client.CoreV1Api) -> None:
    core.create_node({"metadata": {"name": "f1"}})
    sim_apiserver.reset_stats()
    sim_apiserver.faults.fail_next("patch", "nodes", 409, count=2)
    codes = [status_of(lambda: core.patch_node("f1", {"metadata": {"labels": {"a": "b"}}})) for _ in range(2)]
    assert codes == [409, 409]
    assert core.patch_node("f1", {"metadata": {"labels": {"a": "b"}}}).metadata.labels == {"a": "b"}
    assert sim_apiserver.stats()[("patch", "nodes")] == 3
    sim_apiserver.faults.fail_next("get", "nodes", 503, name="f1")
    assert status_of(lambda: core.read_node("f1")) == 503
    sim_apiserver.faults.add_latency(0.3, verb="get", resource="nodes")
    began = time.monotonic()
    core.read_node("f1")
    assert time.monotonic() - began >= 0.3
    sim_apiserver.faults.clear()
    sim_apiserver.faults.fail_next("list", "nodes", 0, count=5, timeout=True)  # the client retries reads
    with pytest.raises(urllib3.exceptions.HTTPError):  # ReadTimeoutError, then MaxRetryError
        core.list_node(_request_timeout=0.5)


def test_drop_watches_ends_open_streams(sim_apiserver: SimApiServer, core: client.CoreV1Api) -> None:
    resp = core.list_namespaced_config_map("default", watch=True, timeout_seconds=30, _preload_content=False)
    wait_for(lambda: sim_apiserver.hub.open_count == 1, what="watch registered")
    began = time.monotonic()
    sim_apiserver.faults.drop_watches("configmaps")
    resp.read()
    assert time.monotonic() - began < 5


@pytest.fixture
def plain_server() -> Iterator[SimApiServer]:
    with SimApiServer(controllers=False) as srv:
        yield srv


def test_graceful_pod_deletion_waits_for_the_kubelet(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "grace"}})
    wait_for(lambda: core.list_namespaced_service_account("grace").items, what="default ServiceAccount")
    spec = {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox:1"}]}
    core.create_namespaced_pod("grace", {"metadata": {"name": "p"}, "spec": spec})
    core.delete_namespaced_pod("p", "grace")
    pod = core.read_namespaced_pod("p", "grace")
    assert pod.metadata.deletion_timestamp and pod.metadata.deletion_grace_period_seconds == 30
    core.delete_namespaced_pod("p", "grace", grace_period_seconds=0)  # what the kubelet sends once stopped
    assert status_of(lambda: core.read_namespaced_pod("p", "grace")) == 404


MALFORMED = [
    b"",
    b"{",
    b"[]",
    b'{"metadata": 5}',
    b'{"metadata": {"name": "m", "labels": 5}}',
    b'{"metadata": {"name": "m", "ownerReferences": [5]}}',
]
# A field of the wrong type where the kind declares it (a real server fails to decode these).
WRONG_TYPE = {
    "/api/v1/nodes": b'{"metadata": {"name": "m"}, "spec": {"taints": 5}}',
    "/api/v1/namespaces/default/pods": b'{"metadata": {"name": "m"}, "spec": {"containers": [5]}}',
    "/apis/apps/v1/namespaces/default/daemonsets": b'{"metadata": {"name": "m"}, "spec": {"template": 5}}',
}


@pytest.mark.parametrize("path", sorted(WRONG_TYPE))
def test_malformed_bodies_get_4xx_and_nothing_is_stored(sim_apiserver: SimApiServer, path: str) -> None:
    import urllib.error
    import urllib.request

    for body in [*MALFORMED, WRONG_TYPE[path]]:
        for method, suffix, ctype in (
            ("POST", "", "application/json"),
            ("PATCH", "/m", "application/merge-patch+json"),
            ("PATCH", "/m", "application/strategic-merge-patch+json"),
        ):
            req = urllib.request.Request(
                sim_apiserver.url + path + suffix, data=body, method=method, headers={"Content-Type": ctype}
            )
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(req, timeout=5)
            assert 400 <= info.value.code < 500, (method, path, body, info.value.read())
    with urllib.request.urlopen(sim_apiserver.url + path, timeout=5) as resp:
        assert json.loads(resp.read())["items"] == []


def test_deleting_a_crd_deletes_its_objects_for_watchers(
    kube_api_client: client.ApiClient, widgets: client.CustomObjectsApi
) -> None:
    listed = widgets.list_namespaced_custom_object(GROUP, VERSION, "default", PLURAL)
    widgets.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, widget("gone"))
    stream = watch.Watch().stream(
        widgets.list_namespaced_custom_object,
        GROUP,
        VERSION,
        "default",
        PLURAL,
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=10,
    )
    assert next(stream)["type"] == "ADDED"
    began = time.monotonic()
    client.ApiextensionsV1Api(kube_api_client).delete_custom_resource_definition("widgets.example.gpuop.dev")
    rest = [(e["type"], e["object"]["metadata"]["name"]) for e in stream]
    assert rest == [("DELETED", "gone")]
    assert time.monotonic() - began < 5  # the watch ended with the resource, not at its timeout


def test_scale_subresource(apps: client.AppsV1Api) -> None:
    body = {
        "metadata": {"name": "op"},
        "spec": {
            "selector": {"matchLabels": {"app": "op"}},
            "template": {
                "metadata": {"labels": {"app": "op"}},
                "spec": {"containers": [{"name": "c", "image": "x:1"}]},
            },
        },
    }
    apps.create_namespaced_deployment("default", body)
    scale = apps.read_namespaced_deployment_scale("op", "default")
    assert scale.spec.replicas == 1 and scale.status.selector == "app=op"
    apps.patch_namespaced_deployment_scale("op", "default", {"spec": {"replicas": 3}})
    deployment = apps.read_namespaced_deployment("op", "default")
    assert deployment.spec.replicas == 3 and deployment.metadata.generation == 2


def test_apply_conflicts_with_an_update_manager(core: client.CoreV1Api) -> None:
    core.create_namespaced_config_map("default", {"metadata": {"name": "owned"}, "data": {"a": "1"}})
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owned"}, "data": {"a": "2"}}
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_config_map(
            "owned", "default", body, field_manager="op", _content_type="application/apply-patch+yaml"
        )
    assert info.value.status == 409
    status = json.loads(info.value.body)
    assert (
        status["message"]
        == 'Apply failed with 1 conflict: conflict with "OpenAPI-Generator" using v1: .data.a'
    )
    assert status["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "OpenAPI-Generator" using v1',
            "field": ".data.a",
        }
    ]


def test_restart_keeps_state_and_port() -> None:
    srv = SimApiServer(controllers=False).start()
    try:
        api = client.ApiClient(client.Configuration(host=srv.url))
        core = client.CoreV1Api(api)
        created = core.create_namespaced_config_map("default", cm("survivor"))
        port = srv.port
        srv.stop()
        assert status_of_connection(lambda: core.read_namespaced_config_map("survivor", "default"))
        srv.start()
        assert srv.port == port
        again = core.read_namespaced_config_map("survivor", "default")
        assert again.metadata.uid == created.metadata.uid
        later = core.create_namespaced_config_map("default", cm("after"))
        assert int(later.metadata.resource_version) > int(created.metadata.resource_version)
        api.close()
    finally:
        srv.stop()


def status_of_connection(call: Callable[[], Any]) -> bool:
    """True when the call fails to connect (the server is down)."""
    try:
        call()
    except urllib3.exceptions.HTTPError:
        return True
    return False


def test_pod_spec_is_immutable_except_images(core: client.CoreV1Api) -> None:
    core.create_namespace({"metadata": {"name": "immut"}})
    wait_for(lambda: core.list_namespaced_service_account("immut").items, what="default ServiceAccount")
    spec = {"containers": [{"name": "c", "image": "busybox:1"}]}
    core.create_namespaced_pod("immut", {"metadata": {"name": "p"}, "spec": spec})
    patched = core.patch_namespaced_pod(
        "p", "immut", {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}
    )
    assert patched.spec.containers[0].image == "busybox:2"
    assert core.patch_namespaced_pod("p", "immut", {"metadata": {"labels": {"a": "b"}}}).metadata.labels == {
        "a": "b"
    }
    bad = {"spec": {"containers": [{"name": "c", "args": ["sleep"]}]}}
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_pod("p", "immut", bad)
    assert info.value.status == 422 and "pod updates may not change fields" in info.value.body
    pod = core.read_namespaced_pod("p", "immut")
    pod.metadata.annotations = {"x": "y"}
    assert core.replace_namespaced_pod("p", "immut", pod).metadata.annotations == {"x": "y"}


def test_workload_selectors_are_immutable(apps: client.AppsV1Api) -> None:
    body = {
        "metadata": {"name": "sel"},
        "spec": {
            "selector": {"matchLabels": {"app": "a"}},
            "template": {
                "metadata": {"labels": {"app": "a"}},
                "spec": {"containers": [{"name": "c", "image": "x:1"}]},
            },
        },
    }
    apps.create_namespaced_daemon_set("default", body)
    change = {
        "spec": {
            "selector": {"matchLabels": {"app": "b"}},
            "template": {"metadata": {"labels": {"app": "b"}}},
        }
    }
    with pytest.raises(ApiException) as info:
        apps.patch_namespaced_daemon_set("sel", "default", change)
    assert info.value.status == 422
    assert json.loads(info.value.body)["details"]["causes"][0]["field"] == "spec.selector"
