"""Process-mode cluster: a profile label repartitions a simulated MI300X node end to end.

The config manager, device plugin and node labeller run as real processes on a simulated node
(operator-managed charts, deploy labels set by hand as the operator would). Labelling the node
`gpuop.dev/gpu-config-profile=cpx-nps4` pauses the plugin and labeller, whose pods the DaemonSet
controller removes; the simulated amdgpu driver re-lays the GPUs; the restored pods find 64
partitions: the kubelet's allocatable and the labeller's partition label follow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpuop_sim import helm, hostfakes
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import NODES

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "gpuop"
AGENTS = ("device-plugin", "node-labeller", "config-manager")


def _allocatable(cluster: SimCluster, node: str) -> int:
    obj: dict[str, Any] = cluster.api().get(NODES, node)
    return int(((obj.get("status") or {}).get("allocatable") or {}).get("amd.com/gpu", "0"))


def _labels(cluster: SimCluster, node: str) -> dict[str, str]:
    obj: dict[str, Any] = cluster.api().get(NODES, node)
    return dict(obj["metadata"].get("labels") or {})


@pytest.mark.slow
def test_profile_label_gives_64_partitions_in_allocatable_and_labels() -> None:
    with SimCluster(profiles=["amd-mi300x-spx"], pods="process") as cluster:
        node = cluster.nodes[0].name
        from gpuop_common.kube import make_api_client
        from kubernetes import client

        api = make_api_client(cluster.kubeconfig)
        core = client.CoreV1Api(api)
        deploy = {f"gpuop.dev/deploy.{agent}": "true" for agent in AGENTS}
        core.patch_node(node, {"metadata": {"labels": deploy}})
        for agent in ("device-plugin", "node-labeller"):
            helm.kubectl_install(
                cluster.kubeconfig,
                ROOT / "charts" / agent,
                namespace=NAMESPACE,
                values=["operatorManaged=true"],
            )
        helm.kubectl_install(
            cluster.kubeconfig,
            ROOT / "charts" / "config-manager",
            namespace=NAMESPACE,
            values=[
                "operatorManaged=true",
                "intervalSeconds=1",
                "config.pausedOperands={device-plugin,node-labeller}",
                "config.quiesceTimeoutSeconds=120",
                # The NPS4 half takes effect at a driver reload: modprobe goes to the node's fakes.
                f"hostExec={hostfakes.host_exec_for(Path('{host_root}'))}",
            ],
        )
        for agent in AGENTS:
            cluster.wait_for_daemonset_ready(f"gpuop-{agent}", NAMESPACE, timeout=300)
        cluster.wait_for(lambda: _allocatable(cluster, node) == 8, timeout=120, what="8 whole GPUs")
        assert _labels(cluster, node).get("amd.com/gpu.compute-memory-partition") == "spx_nps1"

        core.patch_node(node, {"metadata": {"labels": {"gpuop.dev/gpu-config-profile": "cpx-nps4"}}})
        cluster.wait_for(
            lambda: _labels(cluster, node).get("gpuop.dev/gpu-config-state") == "success",
            timeout=300,
            what="gpu-config-state success",
        )
        labels = _labels(cluster, node)
        assert {k: labels[k] for k in deploy} == deploy  # operands restored
        assert labels["dcm.amd.com/gpu-config-profile-state"] == "success"
        cluster.wait_for(lambda: _allocatable(cluster, node) == 64, timeout=180, what="64 CPX partitions")
        cluster.wait_for(
            lambda: _labels(cluster, node).get("amd.com/gpu.compute-memory-partition") == "cpx_nps4",
            timeout=180,
            what="the labeller's partition label",
        )
        expected = {"ConfigPending", "Quiescing", "ApplyingConfig", "ReloadingDriver", "ConfigApplied"}
        cluster.wait_for_events(
            None,
            lambda events: (
                expected
                <= {
                    e["reason"]
                    for e in events
                    if e["involvedObject"]["name"] == node
                    and (e.get("source") or {}).get("component") == "gpuop-config-manager"
                }
            ),
            what=f"the config manager's Events on {node}",
        )
        # The chart's partitionTool auto found amd-smi on the host (hostExec): CPX and NPS4 per GPU
        # through it, CPX at once, NPS4 at one reload of amdgpu.
        calls = hostfakes.recorded(cluster.nodes[0].root)
        sets = [c for c in calls if c[:2] == ["amd-smi", "set"]]
        assert calls[0] == ["amd-smi", "version"] and len({c[3] for c in sets}) == 8
        assert (
            sorted(c[4:] for c in sets)
            == [["--compute-partition", "CPX"]] * 8 + [["--memory-partition", "NPS4"]] * 8
        )
        assert calls[1 + len(sets) :] == [["modprobe", "-r", "amdgpu"], ["modprobe", "amdgpu"]]
        api.close()
