"""Node heartbeats and the node lifecycle controller: a node whose kubelet goes silent turns Unknown
and is tainted unreachable after the grace period, as kube-controller-manager does; one whose
kubelet beats again loses the taints."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from gpuop_sim.waiting import wait_until
from gpuop_sim.workloads.kubeapi import LEASES, NODES, PODS, KubeRest
from gpuop_sim.workloads.manager import ControllerManager
from gpuop_sim.workloads.nodelifecycle import (
    HeartbeatClock,
    silent_nodes,
    unknown_conditions,
    wanted_taints,
)
from gpuop_sim.workloads.scheduling import UNREACHABLE_TAINT
from gpuop_sim.workloads.simkubelet.heartbeat import NODE_LEASE_NAMESPACE, renew_lease
from gpuop_sim.workloads.simkubelet.nodestatus import mark_ready
from gpuop_sim.workloads.simkubelet.status import node_ready_conditions


def ready_node(name: str, heartbeat: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"conditions": node_ready_conditions(heartbeat)}}


def test_a_node_is_silent_only_once_its_heartbeats_stop_changing_for_the_grace_period() -> None:
    clock = HeartbeatClock({})
    nodes = {"a": ready_node("a"), "b": ready_node("b")}
    assert silent_nodes(nodes, {}, clock, now=0.0, grace=50) == []
    lease = {"spec": {"renewTime": "2026-01-01T00:00:40.000000Z"}}
    # b's Lease renews at 40 s; a says nothing new. The controller's own clock decides, not theirs.
    assert silent_nodes(nodes, {"b": lease}, clock, now=40.0, grace=50) == []
    assert silent_nodes(nodes, {"b": lease}, clock, now=50.5, grace=50) == ["a"]
    assert silent_nodes(nodes, {"b": lease}, clock, now=91.0, grace=50) == ["a", "b"]


def test_unknown_conditions_and_unreachable_taints() -> None:
    node = ready_node("a")
    node["spec"] = {"taints": [{"key": "gpuop.dev/upgrade", "effect": "NoSchedule"}]}
    conditions = unknown_conditions(node, "2026-01-01T00:01:00Z")
    assert conditions is not None
    assert {c["type"]: (c["status"], c["reason"]) for c in conditions} == {
        kind: ("Unknown", "NodeStatusUnknown")
        for kind in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
    }
    assert all(c["lastHeartbeatTime"] == "2026-01-01T00:00:00Z" for c in conditions)  # kept
    assert wanted_taints(node, "t") is None  # Ready still True: nothing to add
    node["status"]["conditions"] = conditions
    assert unknown_conditions(node, "later") is None
    taints = wanted_taints(node, "t")
    assert taints is not None
    assert [(t["key"], t["effect"]) for t in taints] == [
        ("gpuop.dev/upgrade", "NoSchedule"),
        (UNREACHABLE_TAINT, "NoSchedule"),
        (UNREACHABLE_TAINT, "NoExecute"),
    ]
    node["spec"]["taints"] = taints
    assert wanted_taints(node, "t") is None
    node["status"]["conditions"] = node_ready_conditions("2026-01-01T00:02:00Z")
    assert wanted_taints(node, "t") == [{"key": "gpuop.dev/upgrade", "effect": "NoSchedule"}]


def pod_conditions(rest: KubeRest) -> dict[str, str]:
    return {c["type"]: c["status"] for c in rest.get(PODS, "on-quiet", "default")["status"]["conditions"]}


def unreachable_effects(rest: KubeRest, node: str) -> set[str]:
    taints = rest.get(NODES, node).get("spec", {}).get("taints") or []
    return {t["effect"] for t in taints if t["key"] == UNREACHABLE_TAINT}


@pytest.fixture
def rest(sim_kubeconfig: Path) -> Iterator[KubeRest]:
    api = KubeRest.from_kubeconfig(sim_kubeconfig)
    yield api
    api.close()


def test_the_controller_marks_a_silent_node_unknown_and_lifts_the_taints_when_it_beats_again(
    rest: KubeRest,
) -> None:
    rest.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "quiet"}})
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    mark_ready(rest, "quiet", "127.0.0.1", now)
    # A short grace period, as `--node-monitor-grace-period` allows; the outcome is the default's.
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "on-quiet"},
        "spec": {"nodeName": "quiet", "containers": [{"name": "c", "image": "x"}]},
    }
    rest.create(PODS, pod, "default")
    ready_pod = [
        {"type": t, "status": "True"} for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    rest.patch(
        PODS, "on-quiet", {"status": {"phase": "Running", "conditions": ready_pod}}, "default", sub="status"
    )
    controllers = ControllerManager(rest, node_monitor_grace_period=1.0)
    controllers.start()
    try:
        wait_until(
            lambda: unreachable_effects(rest, "quiet") == {"NoSchedule", "NoExecute"}, 30, what="taints"
        )
        ready = next(c for c in rest.get(NODES, "quiet")["status"]["conditions"] if c["type"] == "Ready")
        assert (ready["status"], ready["message"]) == ("Unknown", "Kubelet stopped posting node status.")
        # Nobody vouches for the node's pods any more: Ready False, the other conditions as they were.
        conditions = wait_until(
            lambda: pod_conditions(rest) if pod_conditions(rest)["Ready"] == "False" else None,
            30,
            what="pod not Ready",
        )
        assert conditions == {
            "Initialized": "True",
            "Ready": "False",
            "ContainersReady": "True",
            "PodScheduled": "True",
        }

        renew_lease(rest, "quiet")  # the kubelet is back: its Lease, then its Ready status
        lease = rest.get(LEASES, "quiet", NODE_LEASE_NAMESPACE)
        assert lease["spec"]["holderIdentity"] == "quiet"
        assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"
        mark_ready(rest, "quiet", "127.0.0.1", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
        wait_until(lambda: not unreachable_effects(rest, "quiet"), 30, what="unreachable taints lifted")
    finally:
        controllers.stop()
