"""Controllers against a real SimApiServer: DaemonSets, Deployments, Jobs and the scheduler.

The cluster runs in `stub` pod mode (pods turn Running/Ready without processes), so these tests see
exactly what a user of kubectl would: pods per node, DaemonSet status counts, Job conditions.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.daemonset import daemon_pod_name
from gpuop_sim.workloads.kubeapi import DAEMONSETS, DEPLOYMENTS, JOBS, NODES, PODS, KubeRest

NS = "default"
AMD = "feature.node.kubernetes.io/pci-1002.present"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with SimCluster(amd_nodes=2, nvidia_nodes=1, cpu_nodes=1, pods="stub") as sim:
        yield sim


@pytest.fixture
def api(cluster: SimCluster) -> KubeRest:
    return cluster.api()


def daemonset(
    name: str, node_selector: dict[str, str] | None = None, image: str = "test/agent:1"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "agent", "image": image}]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def pods_of(api: KubeRest, app: str) -> dict[str, dict[str, Any]]:
    """Live (not terminating) pods of an app by node name."""
    items, _ = api.list(PODS, NS, labelSelector=f"app={app}")
    return {p["spec"].get("nodeName", ""): p for p in items if not p["metadata"].get("deletionTimestamp")}


def nodes_with(cluster: SimCluster, prefix: str) -> set[str]:
    return {n.name for n in cluster.nodes if n.name.startswith(prefix)}


def wait_pods_on(cluster: SimCluster, app: str, nodes: set[str], timeout: float = 20) -> dict[str, Any]:
    def check() -> tuple[dict[str, Any]] | None:
        current = pods_of(cluster.api(), app)
        return (current,) if set(current) == nodes else None  # a 1-tuple: truthy even with no pods

    (pods,) = cluster.wait_for(check, timeout, what=f"{app} pods on exactly {sorted(nodes)}")
    return dict(pods)


def test_daemonset_with_node_selector_runs_one_pod_on_each_matching_node(
    cluster: SimCluster, api: KubeRest
) -> None:
    api.create(DAEMONSETS, daemonset("amd-agent", {AMD: "true"}), NS)
    pods = wait_pods_on(cluster, "amd-agent", nodes_with(cluster, "amd-"))
    for pod in pods.values():
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("DaemonSet", "amd-agent", True)
    ds = cluster.wait_for_daemonset_ready("amd-agent", NS)
    status = ds["status"]
    assert status["desiredNumberScheduled"] == 2
    assert status["numberReady"] == 2
    assert status["numberAvailable"] == 2
    assert status["numberMisscheduled"] == 0


def test_relabelling_a_node_adds_and_removes_its_daemon_pod(cluster: SimCluster, api: KubeRest) -> None:
    api.create(DAEMONSETS, daemonset("relabel", {"gpuop.dev/deploy.agent": "true"}), NS)
    api.patch(NODES, "nvidia-0", {"metadata": {"labels": {"gpuop.dev/deploy.agent": "true"}}})
    wait_pods_on(cluster, "relabel", {"nvidia-0"})
    api.patch(NODES, "cpu-0", {"metadata": {"labels": {"gpuop.dev/deploy.agent": "true"}}})
    wait_pods_on(cluster, "relabel", {"nvidia-0", "cpu-0"})
    api.patch(NODES, "nvidia-0", {"metadata": {"labels": {"gpuop.dev/deploy.agent": None}}})
    wait_pods_on(cluster, "relabel", {"cpu-0"})
    ds = cluster.wait_for_daemonset_ready("relabel", NS)
    assert ds["status"]["desiredNumberScheduled"] == 1
    api.patch(NODES, "cpu-0", {"metadata": {"labels": {"gpuop.dev/deploy.agent": None}}})
    wait_pods_on(cluster, "relabel", set())


def test_cordon_keeps_daemon_pods_but_blocks_deployment_pods(cluster: SimCluster, api: KubeRest) -> None:
    api.patch(NODES, "cpu-0", {"spec": {"unschedulable": True}})
    try:
        api.create(DAEMONSETS, daemonset("cordon-ds"), NS)
        wait_pods_on(cluster, "cordon-ds", {n.name for n in cluster.nodes})
        api.create(DEPLOYMENTS, deployment("cordon-web", replicas=6), NS)
        pods = cluster.wait_for(lambda: _ready_pods(api, "cordon-web", 6), 20, what="6 web pods")
        assert "cpu-0" not in {p["spec"]["nodeName"] for p in pods}
    finally:
        api.patch(NODES, "cpu-0", {"spec": {"unschedulable": None}})


def test_tainted_node_gets_no_daemon_pod_without_a_toleration(cluster: SimCluster, api: KubeRest) -> None:
    taint = {"key": "gpuop.dev/remediation", "value": "true", "effect": "NoSchedule"}
    api.patch(NODES, "amd-1", {"spec": {"taints": [taint]}})
    # As on a real cluster, a DaemonSet controller that has not seen the taint yet places a pod
    # there, and a NoSchedule taint never removes it: create the DaemonSet once its cache has it.
    assert cluster.controllers is not None
    nodes_seen = cluster.controllers.informers["nodes"]
    cluster.wait_for(
        lambda: ((nodes_seen.get("amd-1") or {}).get("spec") or {}).get("taints"),
        what="taint in the DS cache",
    )
    try:
        api.create(DAEMONSETS, daemonset("taint-ds"), NS)
        tolerant = daemonset("taint-tolerant")
        tolerant["spec"]["template"]["spec"]["tolerations"] = [
            {"key": "gpuop.dev/remediation", "operator": "Exists"}
        ]
        api.create(DAEMONSETS, tolerant, NS)
        everyone = {n.name for n in cluster.nodes}
        wait_pods_on(cluster, "taint-ds", everyone - {"amd-1"})
        wait_pods_on(cluster, "taint-tolerant", everyone)
        ds = cluster.wait_for_daemonset_ready("taint-ds", NS)
        assert ds["status"]["desiredNumberScheduled"] == len(everyone) - 1
        # A NoExecute taint with the same key: the toleration (no effect given) still covers it.
        api.patch(NODES, "amd-1", {"spec": {"taints": [dict(taint, effect="NoExecute")]}})
        wait_pods_on(cluster, "taint-ds", everyone - {"amd-1"})
        wait_pods_on(cluster, "taint-tolerant", everyone)
    finally:
        api.patch(NODES, "amd-1", {"spec": {"taints": None}})
    wait_pods_on(cluster, "taint-ds", everyone)


def test_template_change_rolls_every_pod_to_the_new_revision(cluster: SimCluster, api: KubeRest) -> None:
    api.create(DAEMONSETS, daemonset("roll", image="test/agent:1"), NS)
    everyone = {n.name for n in cluster.nodes}
    before = wait_pods_on(cluster, "roll", everyone)
    cluster.wait_for_daemonset_ready("roll", NS)
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "agent", "image": "test/agent:2"}]}}}}
    api.patch(DAEMONSETS, "roll", patch, NS)

    def rolled() -> dict[str, Any] | None:
        pods = pods_of(api, "roll")
        images = {p["spec"]["containers"][0]["image"] for p in pods.values()}
        return pods if set(pods) == everyone and images == {"test/agent:2"} else None

    after = cluster.wait_for(rolled, 30, what="all roll pods on test/agent:2")
    assert {p["metadata"]["uid"] for p in after.values()}.isdisjoint(
        p["metadata"]["uid"] for p in before.values()
    )
    ds = cluster.wait_for_daemonset_ready("roll", NS)
    assert ds["status"]["updatedNumberScheduled"] == len(everyone)
    assert ds["status"]["observedGeneration"] == ds["metadata"]["generation"] == 2


def test_deleting_a_daemon_pod_gets_it_recreated(cluster: SimCluster, api: KubeRest) -> None:
    api.create(DAEMONSETS, daemonset("heal", {AMD: "true"}), NS)
    pods = wait_pods_on(cluster, "heal", nodes_with(cluster, "amd-"))
    victim = pods["amd-0"]
    api.delete(PODS, victim["metadata"]["name"], NS)
    cluster.wait_for(
        lambda: (
            (p := pods_of(api, "heal").get("amd-0")) and p["metadata"]["uid"] != victim["metadata"]["uid"]
        ),
        20,
        what="a replacement pod on amd-0",
    )


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "web", "image": "test/web:1"}]},
            },
        },
    }


def _ready_pods(api: KubeRest, app: str, count: int) -> list[dict[str, Any]] | None:
    items, _ = api.list(PODS, NS, labelSelector=f"app={app}")
    live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    ready = [
        p
        for p in live
        if p["spec"].get("nodeName")
        and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (p.get("status") or {}).get("conditions", [])
        )
    ]
    return ready if len(ready) == count == len(live) else None


def test_deployment_scales_through_a_replicaset_and_reports_status(
    cluster: SimCluster, api: KubeRest
) -> None:
    api.create(DEPLOYMENTS, deployment("web", replicas=3), NS)
    pods = cluster.wait_for(lambda: _ready_pods(api, "web", 3), 20, what="3 ready web pods")
    assert {p["metadata"]["ownerReferences"][0]["kind"] for p in pods} == {"ReplicaSet"}
    status = cluster.wait_for_object(
        DEPLOYMENTS, "web", NS, lambda d: (d.get("status") or {}).get("readyReplicas") == 3
    )["status"]
    assert status["replicas"] == 3
    assert status["updatedReplicas"] == 3
    api.patch(DEPLOYMENTS, "web", {"spec": {"replicas": 1}}, NS)
    cluster.wait_for(lambda: _ready_pods(api, "web", 1), 20, what="web scaled to 1")


def test_job_runs_to_completion(cluster: SimCluster, api: KubeRest) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "once", "namespace": NS},
        "spec": {
            "completions": 2,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "test/job:1"}]}
            },
        },
    }
    api.create(JOBS, job, NS)

    def complete(obj: dict[str, Any]) -> bool:
        return any(c["type"] == "Complete" for c in (obj.get("status") or {}).get("conditions", []))

    done = cluster.wait_for_object(JOBS, "once", NS, complete, timeout=20)
    assert done["status"]["succeeded"] == 2
    assert done["status"]["active"] == 0


def test_pending_pod_reports_why_it_cannot_be_scheduled(cluster: SimCluster, api: KubeRest) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "nowhere", "namespace": NS},
        "spec": {"nodeSelector": {"no": "such-node"}, "containers": [{"name": "c", "image": "test/x:1"}]},
    }
    api.create(PODS, copy.deepcopy(pod), NS)

    def unschedulable(obj: dict[str, Any]) -> bool:
        conditions = (obj.get("status") or {}).get("conditions") or []
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)

    stuck = cluster.wait_for_object(PODS, "nowhere", NS, unschedulable)
    assert "nodeName" not in stuck["spec"]
    message = next(c["message"] for c in stuck["status"]["conditions"] if c["type"] == "PodScheduled")
    assert message.startswith(f"0/{len(cluster.nodes)} nodes are available")


def test_nodes_are_ready_without_the_not_ready_taint(cluster: SimCluster, api: KubeRest) -> None:
    nodes, _ = api.list(NODES)
    assert {n["metadata"]["name"] for n in nodes} == {n.name for n in cluster.nodes}
    for node in nodes:
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        assert all(t["key"] != "node.kubernetes.io/not-ready" for t in node["spec"].get("taints") or [])
        labels = node["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == node["metadata"]["name"]
        assert labels["kubernetes.io/os"] == "linux"
        assert "node.kubernetes.io/instance-type" in labels
    vendors = {n["metadata"]["name"]: n["metadata"]["labels"] for n in nodes}
    assert vendors["amd-0"][AMD] == "true"
    assert vendors["nvidia-0"]["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert AMD not in vendors["cpu-0"]


def test_controllers_recover_from_failed_writes_dropped_watches_and_compaction(
    cluster: SimCluster, api: KubeRest
) -> None:
    server = cluster.server
    assert server is not None
    server.faults.fail_next("create", "pods", 500, count=2)
    server.compact()
    server.faults.drop_watches()  # informers resume from a compacted revision: 410, then relist
    api.create(DAEMONSETS, daemonset("resilient"), NS)
    wait_pods_on(cluster, "resilient", {n.name for n in cluster.nodes})
    cluster.wait_for_daemonset_ready("resilient", NS)


def test_daemon_pod_name_taken_by_another_pod_still_gets_a_daemon_pod(
    cluster: SimCluster, api: KubeRest
) -> None:
    squatter = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": daemon_pod_name("clash", "amd-0"),
            "namespace": NS,
            "labels": {"app": "squatter"},
        },
        "spec": {"nodeName": "cpu-0", "containers": [{"name": "c", "image": "test/x:1"}]},
    }
    api.create(PODS, squatter, NS)
    api.create(DAEMONSETS, daemonset("clash", {AMD: "true"}), NS)
    pods = wait_pods_on(cluster, "clash", nodes_with(cluster, "amd-"))
    assert pods["amd-0"]["metadata"]["name"].startswith("clash-")
