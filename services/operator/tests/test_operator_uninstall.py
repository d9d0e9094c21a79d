"""`gpuop-operator --uninstall-cleanup` (the chart's pre-delete hook): DeviceConfigs deleted with the
operator still running, a stuck finalizer released after the wait, gpuop marks gone from every node."""

from __future__ import annotations

from typing import Any

import pytest
from gpuop_operator.kubeio import KubeJson
from gpuop_operator.uninstall import MARKING_AGENTS, node_cleanup_patch, uninstall_cleanup
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import NODES, Resource

NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
OWNED = "gpuop.dev/node-labeller.owned-labels"


def _node(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n", "labels": labels, "annotations": annotations}}


def test_patch_removes_deploy_labels_operator_annotations_and_labeller_labels() -> None:
    node = _node(
        {
            "gpuop.dev/deploy.device-plugin": "true",
            "gpuop.dev/gpu.count": "8",
            "amd.com/gpu.family": "AI",
            "team": "ml",  # not ours: stays
        },
        {
            "gpuop.dev/stage": "ready",
            "gpuop.dev/deviceconfig": "gpu-operator/amd",
            OWNED: "amd.com/gpu.family,gpuop.dev/gpu.count,amd.com/gone",
            "note": "kept",
        },
    )
    assert node_cleanup_patch(node, agents_running=()) == {
        "metadata": {
            "labels": {
                "amd.com/gpu.family": None,
                "gpuop.dev/deploy.device-plugin": None,
                "gpuop.dev/gpu.count": None,
            },
            "annotations": {OWNED: None, "gpuop.dev/deviceconfig": None, "gpuop.dev/stage": None},
        }
    }


def test_labeller_labels_stay_while_a_labeller_still_runs_there() -> None:
    node = _node({"gpuop.dev/gpu.count": "8"}, {OWNED: "gpuop.dev/gpu.count"})
    assert node_cleanup_patch(node, agents_running={"node-labeller"}) is None
    assert node_cleanup_patch(_node({"team": "ml"}, {}), agents_running=()) is None


def test_garbled_ownership_annotation_removes_only_labels_present() -> None:
    """Bad input: an ownership annotation with empty entries and keys the node does not carry."""
    node = _node({"a/b": "1"}, {OWNED: ",, a/b ,,not-there,"})
    assert node_cleanup_patch(node, agents_running=()) == {
        "metadata": {"labels": {"a/b": None}, "annotations": {OWNED: None}}
    }


def test_config_manager_and_test_runner_marks_and_pause_lists_go_once_their_agents_left() -> None:
    """The config manager's state labels/annotations, the test runner's result, the operand pause
    lists: nothing maintains them after an uninstall. The administrator's profile label and test
    request stay, and an agent still running keeps its own marks (it would write them back)."""
    agent_marks = {
        "gpuop.dev/gpu-config-state": "success",
        "nvidia.com/mig.config.state": "success",
        "dcm.amd.com/gpu-config-profile-state": "success",
        "gpuop.dev/gpu.test-result": "passed",
    }
    node = _node(
        {**agent_marks, "gpuop.dev/gpu-config-profile": "cpx-nps1"},
        {
            "gpuop.dev/gpu-config-result": "{}",
            "gpuop.dev/gpu-config-failure-reason": "old",
            "gpuop.dev/gpu.test-result-time": "2026-12-05T10:00:00Z",
            "gpuop.dev/test-result": "{}",
            "gpuop.dev/test-request": "{}",
            "gpuop.dev/remediation.paused": "gpuop.dev/deploy.device-plugin",
        },
    )
    assert node_cleanup_patch(node, agents_running=()) == {
        "metadata": {
            "labels": dict.fromkeys(sorted(agent_marks)),
            "annotations": {
                "gpuop.dev/gpu-config-failure-reason": None,
                "gpuop.dev/gpu-config-result": None,
                "gpuop.dev/gpu.test-result-time": None,
                "gpuop.dev/remediation.paused": None,
                "gpuop.dev/test-result": None,
            },
        }
    }
    kept = node_cleanup_patch(node, agents_running=MARKING_AGENTS)
    assert kept == {"metadata": {"annotations": {"gpuop.dev/remediation.paused": None}}}
    only_runner = node_cleanup_patch(node, agents_running={"test-runner"})
    assert only_runner is not None and "gpuop.dev/gpu.test-result" not in only_runner["metadata"]["labels"]


@pytest.mark.slow
def test_with_the_operator_running_deletion_goes_through_its_finalizer(
    stub_cluster: SimCluster, kit: Any
) -> None:
    api = stub_cluster.api()
    with kit.operator_running(stub_cluster) as running:
        api.create(DEVICECONFIGS, kit.device_config(), NAMESPACE)
        stub_cluster.wait_for(
            lambda: all(
                "gpuop.dev/deploy.device-plugin" in n["metadata"]["labels"] for n in api.list(NODES)[0]
            ),
            timeout=60,
            what="deploy labels on every node",
        )
        report = uninstall_cleanup(
            KubeJson(running.api), namespace=NAMESPACE, release=kit.release, watch_namespace=None, timeout=60
        )
    assert report.deleted == (f"{NAMESPACE}/gpus",) and report.forced == ()
    assert api.list(DEVICECONFIGS, NAMESPACE)[0] == []
    for node in api.list(NODES)[0]:
        meta = node["metadata"]
        assert not [k for k in meta["labels"] if k.startswith("gpuop.dev/deploy.")], meta["name"]
        assert "gpuop.dev/stage" not in (meta.get("annotations") or {})


@pytest.mark.slow
def test_without_an_operator_the_finalizer_is_released_after_the_wait(
    stub_cluster: SimCluster, kit: Any
) -> None:
    """Bad state: the operator is not running, so nothing would ever release the finalizer."""
    api = stub_cluster.api()
    dc = kit.device_config("orphan")
    dc["metadata"]["finalizers"] = ["gpuop.dev/node-cleanup"]
    api.create(DEVICECONFIGS, dc, NAMESPACE)
    (node, *_) = api.list(NODES)[0]
    name = node["metadata"]["name"]
    api.patch(
        NODES,
        name,
        {
            "metadata": {
                "labels": {"gpuop.dev/deploy.node-labeller": "true", "gpuop.dev/gpu.count": "8"},
                "annotations": {"gpuop.dev/stage": "ready", OWNED: "gpuop.dev/gpu.count"},
            }
        },
    )
    client_api = kit.api_client_for(stub_cluster)
    try:
        report = uninstall_cleanup(
            KubeJson(client_api), namespace=NAMESPACE, release=kit.release, watch_namespace=None, timeout=2
        )
    finally:
        client_api.close()
    assert report.forced == (f"{NAMESPACE}/orphan",)
    assert api.list(DEVICECONFIGS, NAMESPACE)[0] == []
    meta = api.get(NODES, name)["metadata"]
    assert (
        "gpuop.dev/deploy.node-labeller" not in meta["labels"] and "gpuop.dev/gpu.count" not in meta["labels"]
    )
    assert OWNED not in (meta.get("annotations") or {}) and name in report.cleaned_nodes


@pytest.mark.slow
def test_a_driver_uninstall_the_wait_cuts_short_is_announced_and_reported(
    stub_cluster: SimCluster, kit: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """With uninstallPolicy Uninstall the operator keeps the finalizer through a walk that may take
    far longer than the hook waits: the hook says so before waiting and names what it cut short."""
    api = stub_cluster.api()
    dc = kit.device_config("uninstalls", {"driver": {"enable": False, "uninstallPolicy": "Uninstall"}})
    dc["metadata"]["finalizers"] = ["gpuop.dev/node-cleanup"]
    api.create(DEVICECONFIGS, dc, NAMESPACE)
    kept = kit.device_config("keeps")
    kept["metadata"]["finalizers"] = ["gpuop.dev/node-cleanup"]
    api.create(DEVICECONFIGS, kept, NAMESPACE)
    (node, *_) = api.list(NODES)[0]
    name = node["metadata"]["name"]
    walk = {"gpuop.dev/driver-upgrade-state": "draining", "gpuop.dev/driver.version": "6.2"}
    api.patch(NODES, name, {"metadata": {"labels": walk}})
    client_api = kit.api_client_for(stub_cluster)
    try:
        with caplog.at_level("WARNING", logger="gpuop_operator.uninstall"):
            report = uninstall_cleanup(
                KubeJson(client_api),
                namespace=NAMESPACE,
                release=kit.release,
                watch_namespace=None,
                timeout=2,
            )
    finally:
        client_api.close()
    assert set(report.forced) == {f"{NAMESPACE}/uninstalls", f"{NAMESPACE}/keeps"}
    assert report.uninstall_cut_short == (f"{NAMESPACE}/uninstalls",)
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    up_front = next(r for r in warnings if "uninstallPolicy Uninstall" in r.getMessage())
    assert "2s" in up_front.getMessage() and up_front.deviceconfigs == [f"{NAMESPACE}/uninstalls"]  # type: ignore[attr-defined]
    cut = next(r for r in warnings if "cut short" in r.getMessage() and hasattr(r, "nodes"))
    assert cut.nodes == [name]  # type: ignore[attr-defined]
