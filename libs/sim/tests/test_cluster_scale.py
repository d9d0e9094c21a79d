"""Scale smoke: 200 `stub` nodes, one DaemonSet, every pod Running and Ready (no timing assertions)."""

from __future__ import annotations

import time

import pytest
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import DAEMONSETS, PODS

NODES = 200


@pytest.mark.slow
def test_daemonset_becomes_ready_on_200_stub_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    with SimCluster(amd_nodes=NODES // 2, nvidia_nodes=NODES // 2, pods="stub") as cluster:
        up = time.monotonic()
        ds = {
            "apiVersion": "apps/v1",
            "kind": "DaemonSet",
            "metadata": {"name": "everywhere", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "everywhere"}},
                "template": {
                    "metadata": {"labels": {"app": "everywhere"}},
                    "spec": {"containers": [{"name": "agent", "image": "test/agent:1"}]},
                },
            },
        }
        cluster.api().create(DAEMONSETS, ds, "default")
        status = cluster.wait_for_daemonset_ready("everywhere", "default", timeout=240)["status"]
        ready = time.monotonic()
        assert status["desiredNumberScheduled"] == NODES
        assert status["numberReady"] == NODES
        pods, _ = cluster.api().list(PODS, "default", labelSelector="app=everywhere")
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(n.name for n in cluster.nodes)
        assert all(p["status"]["phase"] == "Running" for p in pods)
    with capsys.disabled():
        print(
            f"\n{NODES} stub nodes: cluster up in {up - started:.1f}s, DaemonSet ready in {ready - up:.1f}s"
        )


def test_stub_nodes_of_one_profile_share_a_root_and_process_nodes_own_theirs() -> None:
    profiles = ["amd-mi210x8", "amd-mi210x8", "nvidia-h100x8", "nvidia-h100x8"]
    with SimCluster(profiles=profiles, pods="stub") as stub:
        stub_nodes = list(stub.nodes)
    with SimCluster(profiles=profiles[:2], pods="process", device_plugins=False) as process:
        process_nodes = list(process.nodes)
    assert [n.name for n in stub_nodes] == ["amd-0", "amd-1", "nvidia-0", "nvidia-1"]
    assert stub_nodes[0].root == stub_nodes[1].root != stub_nodes[2].root == stub_nodes[3].root
    assert [n.gpu_count for n in stub_nodes] == [8, 8, 8, 8]
    assert process_nodes[0].root != process_nodes[1].root


def test_device_plugins_without_node_roots_is_refused() -> None:
    with pytest.raises(ValueError, match="device_plugins needs node_roots"):
        SimCluster(amd_nodes=1, pods="stub", device_plugins=True, node_roots=False)
