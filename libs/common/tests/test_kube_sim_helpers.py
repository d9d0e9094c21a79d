"""Kube helpers against the simulated API server: client from a kubeconfig, label patches, Events, retries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpuop_common.kube import (
    EventRecorder,
    ObjectRef,
    make_api_client,
    patch_node_labels,
    patch_node_metadata,
)
from gpuop_common.retry import kube_retry
from kubernetes import client
from kubernetes.client.exceptions import ApiException


def _create_node(api: client.ApiClient, name: str, labels: dict[str, str]) -> None:
    client.CoreV1Api(api).create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=labels)))


def _labels(api: client.ApiClient, name: str) -> dict[str, str]:
    node = client.CoreV1Api(api).read_node(name)
    assert node.metadata is not None
    return dict(node.metadata.labels or {})


def _resource_version(api: client.ApiClient, name: str) -> str:
    node = client.CoreV1Api(api).read_node(name)
    assert node.metadata is not None and node.metadata.resource_version
    return node.metadata.resource_version


def test_client_from_sim_kubeconfig(sim_kubeconfig: Path) -> None:
    api = make_api_client(sim_kubeconfig)
    names = [ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items if ns.metadata]
    assert "default" in names


def test_patch_node_labels_changes_only_what_differs(kube_api_client: client.ApiClient) -> None:
    _create_node(kube_api_client, "gpu-1", {"keep": "1", "change": "old", "remove": "x", "owner": "y"})

    changes = patch_node_labels(
        kube_api_client, "gpu-1", {"keep": "1", "change": "new", "remove": None, "add": "z"}
    )

    assert changes == {"change": "new", "remove": None, "add": "z"}
    assert _labels(kube_api_client, "gpu-1") == {"keep": "1", "change": "new", "owner": "y", "add": "z"}


def test_patch_node_metadata_sets_and_deletes_labels_and_annotations(
    kube_api_client: client.ApiClient,
) -> None:
    _create_node(kube_api_client, "gpu-1", {"keep": "1", "drop": "x"})
    patch_node_metadata(kube_api_client, "gpu-1", annotations={"a": "1", "b": "2"})
    patch_node_metadata(kube_api_client, "gpu-1", labels={"drop": None, "new": "y"}, annotations={"b": None})
    node = client.CoreV1Api(kube_api_client).read_node("gpu-1")
    assert node.metadata is not None
    assert node.metadata.labels == {"keep": "1", "new": "y"}
    assert node.metadata.annotations == {"a": "1"}


def test_patch_node_metadata_pinned_to_a_stale_version_conflicts(kube_api_client: client.ApiClient) -> None:
    _create_node(kube_api_client, "gpu-1", {})
    stale = _resource_version(kube_api_client, "gpu-1")
    patch_node_metadata(kube_api_client, "gpu-1", annotations={"request": "one"})
    with pytest.raises(ApiException) as caught:
        patch_node_metadata(kube_api_client, "gpu-1", annotations={"request": None}, resource_version=stale)
    assert caught.value.status == 409
    patch_node_metadata(
        kube_api_client,
        "gpu-1",
        annotations={"request": None},
        resource_version=_resource_version(kube_api_client, "gpu-1"),
    )


def test_patch_node_labels_without_change_writes_nothing(kube_api_client: client.ApiClient) -> None:
    _create_node(kube_api_client, "gpu-2", {"a": "1"})
    before = _resource_version(kube_api_client, "gpu-2")
    assert patch_node_labels(kube_api_client, "gpu-2", {"a": "1", "gone": None}) == {}
    assert _resource_version(kube_api_client, "gpu-2") == before


def test_patch_node_labels_dry_run(kube_api_client: client.ApiClient) -> None:
    _create_node(kube_api_client, "gpu-3", {"a": "1"})
    assert patch_node_labels(kube_api_client, "gpu-3", {"a": "2"}, dry_run=True) == {"a": "2"}
    assert _labels(kube_api_client, "gpu-3") == {"a": "1"}


def test_patch_node_labels_retries_server_errors(
    sim_apiserver: Any, kube_api_client: client.ApiClient
) -> None:
    _create_node(kube_api_client, "gpu-4", {})
    sim_apiserver.faults.fail_next("patch", "nodes", 500, count=2)
    assert patch_node_labels(kube_api_client, "gpu-4", {"a": "1"}) == {"a": "1"}
    assert _labels(kube_api_client, "gpu-4") == {"a": "1"}


def test_missing_node_is_not_retried(sim_apiserver: Any, kube_api_client: client.ApiClient) -> None:
    with pytest.raises(ApiException) as raised:
        patch_node_labels(kube_api_client, "no-such-node", {"a": "1"})
    assert raised.value.status == 404


def test_conflict_then_success_rereads(sim_apiserver: Any, kube_api_client: client.ApiClient) -> None:
    _create_node(kube_api_client, "gpu-5", {"n": "0"})
    core = client.CoreV1Api(kube_api_client)
    attempts: list[str] = []

    @kube_retry(wait_initial=0.001, wait_max=0.01, wait_jitter=0)
    def bump() -> None:
        node = core.read_node("gpu-5")
        assert node.metadata is not None and node.metadata.labels is not None
        attempts.append(node.metadata.resource_version or "")
        node.metadata.labels["n"] = str(int(node.metadata.labels["n"]) + 1)
        core.replace_node("gpu-5", node)

    sim_apiserver.faults.fail_next("update", "nodes", 409)
    bump()
    assert len(attempts) == 2
    assert _labels(kube_api_client, "gpu-5")["n"] == "1"


def test_unprocessable_is_not_retried(sim_apiserver: Any, kube_api_client: client.ApiClient) -> None:
    _create_node(kube_api_client, "gpu-6", {})
    sim_apiserver.faults.fail_next("patch", "nodes", 422, count=1)
    with pytest.raises(ApiException) as raised:
        patch_node_labels(kube_api_client, "gpu-6", {"a": "1"})
    assert raised.value.status == 422
    # The fault was used up by the single attempt: the next call goes through.
    assert patch_node_labels(kube_api_client, "gpu-6", {"a": "1"}) == {"a": "1"}


def _events(api: client.ApiClient, namespace: str) -> list[client.CoreV1Event]:
    return list(client.CoreV1Api(api).list_namespaced_event(namespace).items)


def test_event_fields_and_repeat_folding(kube_api_client: client.ApiClient) -> None:
    recorder = EventRecorder(kube_api_client, component="gpuop-test-runner", host="gpu-7")
    about = ObjectRef.node("gpu-7")
    recorder.record(about, "TestPassed", "gst_single passed on 8 GPUs")
    recorder.record(about, "TestPassed", "gst_single passed on 8 GPUs")
    recorder.record(about, "TestFailed", "gpu 3 failed", "Warning")

    events = {e.reason: e for e in _events(kube_api_client, "default")}
    assert set(events) == {"TestPassed", "TestFailed"}
    passed = events["TestPassed"]
    assert passed.count == 2
    assert passed.type == "Normal"
    assert passed.message == "gst_single passed on 8 GPUs"
    assert passed.involved_object.kind == "Node"
    assert passed.involved_object.name == "gpu-7"
    assert passed.source is not None and passed.source.component == "gpuop-test-runner"
    assert passed.source.host == "gpu-7"
    assert passed.first_timestamp is not None and passed.last_timestamp is not None
    assert passed.last_timestamp >= passed.first_timestamp
    assert events["TestFailed"].type == "Warning"
    assert events["TestFailed"].count == 1


def test_namespaced_event_goes_to_the_objects_namespace(kube_api_client: client.ApiClient) -> None:
    client.CoreV1Api(kube_api_client).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name="gpuop"))
    )
    recorder = EventRecorder(kube_api_client, component="gpuop-operator")
    recorder.record(ObjectRef(kind="Pod", name="runner", namespace="gpuop", uid="u-1"), "Started", "x" * 5000)
    (event,) = _events(kube_api_client, "gpuop")
    assert event.involved_object.namespace == "gpuop"
    assert event.involved_object.uid == "u-1"
    assert event.message is not None and len(event.message) == 1024


def test_event_failure_is_logged_not_raised(sim_apiserver: Any, kube_api_client: client.ApiClient) -> None:
    sim_apiserver.faults.fail_next("create", "events", 403, count=1)
    EventRecorder(kube_api_client, component="gpuop-operator").record(ObjectRef.node("n"), "R", "m")
    assert _events(kube_api_client, "default") == []
