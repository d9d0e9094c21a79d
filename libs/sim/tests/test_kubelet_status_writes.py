"""What the simulated kubelet writes to the API server, held to what a real control plane accepts.

A process-mode node: pods run as local processes, so a refused status write would otherwise leave a
pod Pending with its container running unseen (what happened against a real kube-apiserver).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import EVENTS, LEASES, PODS, KubeRest
from gpuop_sim.workloads.simkubelet.heartbeat import NODE_LEASE_NAMESPACE

NS = "default"
SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with SimCluster(profiles=["cpu-only"], pods="process", image_commands={"test/sleeper": SLEEPER}) as sim:
        yield sim


def burstable_pod(name: str) -> dict[str, Any]:
    container = {"name": "c", "image": "test/sleeper:1", "resources": {"requests": {"cpu": "10m"}}}
    spec = {"containers": [container]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def running(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return pod["status"].get("phase") == "Running" and all("running" in s["state"] for s in statuses)


def test_a_burstable_pod_runs_and_keeps_the_servers_qos_class(cluster: SimCluster) -> None:
    api: KubeRest = cluster.api()
    api.create(PODS, burstable_pod("burstable"), NS)
    pod = cluster.wait_for_object(PODS, "burstable", NS, running)
    assert pod["status"]["qosClass"] == "Burstable"
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0


def test_a_refused_status_write_is_reported_and_the_pod_keeps_running(cluster: SimCluster) -> None:
    assert cluster.server is not None
    # The kubelet's first status write for this pod is refused as the real server refuses an
    # invalid one; the pod exists throughout, so this is no reason to stop its containers.
    cluster.server.faults.fail_next("patch", "pods", 422, name="refused", subresource="status")
    api: KubeRest = cluster.api()
    api.create(PODS, burstable_pod("refused"), NS)

    def refusal(events: list[dict[str, Any]]) -> bool:
        return any(
            e.get("reason") == "FailedStatusUpdate" and e["involvedObject"]["name"] == "refused"
            for e in events
        )

    events = cluster.wait_for_events(NS, refusal, what="the kubelet's FailedStatusUpdate Event")
    event = next(e for e in events if e.get("reason") == "FailedStatusUpdate")
    assert event["type"] == "Warning" and event["source"]["component"] == "kubelet"
    pod = cluster.wait_for_object(PODS, "refused", NS, running, timeout=60)
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0  # the same container all along


def test_a_deleted_pod_stops_its_worker_without_a_refusal_event(cluster: SimCluster) -> None:
    api: KubeRest = cluster.api()
    api.create(PODS, burstable_pod("gone"), NS)
    cluster.wait_for_object(PODS, "gone", NS, running)
    api.delete(PODS, "gone", NS, grace_period_seconds=0)
    cluster.wait_for(lambda: not any(p["metadata"]["name"] == "gone" for p in api.list(PODS, NS)[0]))
    events, _ = api.list(EVENTS, NS)
    assert not [e for e in events if e.get("reason") == "FailedStatusUpdate" and "gone" in str(e)]


def test_the_kubelet_renews_its_node_lease(cluster: SimCluster) -> None:
    api: KubeRest = cluster.api()
    first = cluster.wait_for_object(LEASES, "cpu-0", NODE_LEASE_NAMESPACE)
    assert first["spec"]["holderIdentity"] == "cpu-0"
    assert first["spec"]["leaseDurationSeconds"] == 40
    renewed = cluster.wait_for(
        lambda: (
            api.get(LEASES, "cpu-0", NODE_LEASE_NAMESPACE)["spec"]["renewTime"] != first["spec"]["renewTime"]
        ),
        timeout=60,
        what="a renewed node Lease",
    )
    assert renewed


def test_a_pod_replaced_under_the_same_name_runs_and_its_predecessor_reports_nothing(
    cluster: SimCluster,
) -> None:
    api: KubeRest = cluster.api()
    api.create(PODS, burstable_pod("twin"), NS)
    first = cluster.wait_for_object(PODS, "twin", NS, running)
    api.delete(PODS, "twin", NS, grace_period_seconds=0)
    api.create(PODS, burstable_pod("twin"), NS)
    second = cluster.wait_for_object(
        PODS, "twin", NS, lambda p: running(p) and p["metadata"]["uid"] != first["metadata"]["uid"]
    )
    assert second["status"]["qosClass"] == "Burstable"
    events, _ = api.list(EVENTS, NS)
    assert not [
        e for e in events if e.get("reason") == "FailedStatusUpdate" and e["involvedObject"]["name"] == "twin"
    ]
