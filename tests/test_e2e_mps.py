"""Process-mode cluster: a DeviceConfig asking for MPS on an NVIDIA node, end to end.

The umbrella chart as installed (the MPS control daemon's DaemonSet is on by default), the real
operator, plugin, labeller and `gpuop-mps-control-daemon` processes. The user applies a DeviceConfig
with `devicePlugin.sharing.mps`; the operator projects it into the plugin's ConfigMap (which the
daemon reads too), the labeller marks the node `nvidia.com/mps.capable=true`, the daemon's pod is
scheduled there, mounts the tmpfs at `<root>/shm` and starts the host's (fake)
`nvidia-cuda-mps-control` with it as its /dev/shm, and only then the plugin
advertises each GPU as `replicas` devices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpuop_sim import helm, hostfakes
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import NODES, PODS, Resource

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
REPLICAS = 4


def _node(cluster: SimCluster, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = cluster.api().get(NODES, name)
    return obj


def _mps_pods(cluster: SimCluster) -> list[dict[str, Any]]:
    pods, _ = cluster.api().list(PODS, NAMESPACE, labelSelector="app.kubernetes.io/name=device-plugin-mps")
    return list(pods)


def _running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running"


@pytest.mark.slow
def test_mps_deviceconfig_runs_the_control_daemon_then_the_plugin_advertises_replicas() -> None:
    with SimCluster(profiles=["nvidia-h100x8"], pods="process") as cluster:
        node = cluster.nodes[0]
        helm.kubectl_install(
            cluster.kubeconfig,
            ROOT / "charts" / "gpu-operator",
            namespace=NAMESPACE,
            values=[
                "deviceConfigs=null",  # the user's own DeviceConfig below
                f"device-plugin.mpsControlDaemon.hostExec={hostfakes.host_exec_for(Path('{host_root}'))}",
            ],
        )
        spec = {
            "vendor": "nvidia",
            "selector": {"matchLabels": {"feature.node.kubernetes.io/pci-10de.present": "true"}},
            "devicePlugin": {"sharing": {"mps": {"replicas": REPLICAS}}},
            "metricsExporter": {"enable": False},
        }
        dc = {"apiVersion": DEVICECONFIGS.group_version, "kind": "DeviceConfig"}
        cluster.api().create(DEVICECONFIGS, {**dc, "metadata": {"name": "mps"}, "spec": spec}, NAMESPACE)

        cluster.wait_for(
            lambda: _node(cluster, node.name)["metadata"]["labels"].get("nvidia.com/mps.capable") == "true",
            timeout=240,
            what="the labeller's nvidia.com/mps.capable=true",
        )
        cluster.wait_for(
            lambda: any(_running(p) and p["spec"].get("nodeName") == node.name for p in _mps_pods(cluster)),
            timeout=180,
            what="the MPS control daemon's pod running on the node",
        )
        try:
            cluster.wait_for(
                lambda: (
                    (_node(cluster, node.name)["status"].get("allocatable") or {}).get("nvidia.com/gpu")
                    == str(node.gpu_count * REPLICAS)
                ),
                timeout=180,
                what=f"{node.gpu_count} GPUs x {REPLICAS} MPS replicas in allocatable",
            )
        except Exception:
            print(_node(cluster, node.name)["status"].get("allocatable"))
            print(cluster.pod_logs_report(NAMESPACE))
            raise
        # The host's daemon runs with the per-client defaults the plugin passes to containers.
        state = hostfakes.mps_state(node.root)
        assert state["running"] is True
        # Its /dev/shm is the tmpfs at <root>/shm (what MPS clients get at /dev/shm), not the host's:
        # the privileged pod could mount it and `unshare --mount` to bind it (CAP_SYS_ADMIN).
        assert state["dev_shm"] == "/run/gpuop/mps/shm"
        assert hostfakes.mounts(node.root)["/run/gpuop/mps/shm"]["type"] == "tmpfs"
        assert "/dev/shm" not in hostfakes.mounts(node.root)
        assert f"set_default_active_thread_percentage {100 // REPLICAS}" in state["defaults"]
        assert sum(d.startswith("set_default_device_pinned_mem_limit ") for d in state["defaults"]) == (
            node.gpu_count
        )
        labels = _node(cluster, node.name)["metadata"]["labels"]
        assert labels["nvidia.com/gpu.replicas"] == str(REPLICAS)
        assert labels["nvidia.com/gpu.sharing-strategy"] == "mps"
