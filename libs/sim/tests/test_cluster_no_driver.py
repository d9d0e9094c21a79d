"""A cluster whose GPU nodes have no driver yet, and reboots of stub nodes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from gpuop_sim import hostfakes
from gpuop_sim.cluster import SimCluster
from gpuop_sim.nodes.fake_nvml import FakeNvml
from gpuop_sim.nodes.fake_nvml_api import NVML_ERROR_DRIVER_NOT_LOADED, NVMLError
from gpuop_sim.workloads.kubeapi import JOBS, NODES, PODS
from gpuop_sim.workloads.simkubelet.stub import StubOutcome

NS = "default"


def long_jobs(pod: dict[str, Any]) -> StubOutcome | None:
    return StubOutcome(600) if "job-name" in (pod["metadata"].get("labels") or {}) else None


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    with SimCluster(
        profiles=["amd-mi300x-spx", "nvidia-h100x8"],
        pods="stub",
        node_roots=True,
        driver_loaded=False,
        stub_outcome=long_jobs,
        reboot_down_seconds=0.2,
    ) as sim:
        yield sim


def run(root: Any, *argv: str) -> int:
    return hostfakes.main(["--root", str(root), *argv])


def test_gpu_nodes_carry_nfd_pci_labels_but_no_driver(cluster: SimCluster) -> None:
    amd, nvidia = cluster.node("amd-0"), cluster.node("nvidia-0")
    assert not amd.driver_loaded and not nvidia.driver_loaded and amd.gpu_count == 8
    labels = cluster.api().get(NODES, "amd-0")["metadata"]["labels"]
    assert labels["feature.node.kubernetes.io/pci-1002.present"] == "true"
    labels = cluster.api().get(NODES, "nvidia-0")["metadata"]["labels"]
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert not (amd.root / "dev/kfd").exists() and not (amd.root / "sys/class/kfd").exists()
    assert (amd.root / "sys/bus/pci/devices").is_dir()
    nvml = FakeNvml(path=cluster.node("nvidia-0").root / "var/lib/gpuop-sim/nvml.json")
    with pytest.raises(NVMLError) as raised:
        nvml.nvmlInit()
    assert raised.value.value == NVML_ERROR_DRIVER_NOT_LOADED


def test_installed_driver_survives_a_reboot_only_when_listed_for_boot(cluster: SimCluster) -> None:
    root = cluster.node("amd-0").root
    assert run(root, "apt-get", "install", "-y", f"linux-headers-{hostfakes.DEFAULT_KERNEL}") == 0
    version = hostfakes.add_vendor_repository(root, "amd", "6.3.4")
    assert run(root, "apt-get", "install", "-y", f"amdgpu-dkms={version}") == 0
    assert run(root, "modprobe", "amdgpu") == 0
    assert (root / "dev/kfd").is_file() and (root / "sys/class/kfd/kfd/topology/nodes").is_dir()
    cluster.reboot_node("amd-0")
    assert not (root / "dev/kfd").exists()
    hostfakes.write_file(root / "etc/modules-load.d/amdgpu.conf", "amdgpu")
    cluster.reboot_node("amd-0")
    assert (root / "dev/kfd").is_file()


def test_stub_node_reboot_restarts_daemons_and_fails_running_job_pods(cluster: SimCluster) -> None:
    api = cluster.api()
    daemon = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "agent", "namespace": NS},
        "spec": {"nodeName": "nvidia-0", "containers": [{"name": "agent", "image": "test/agent:1"}]},
    }
    api.create(PODS, daemon, NS)
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "upgrade", "namespace": NS},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "nodeName": "nvidia-0",
                    "containers": [{"name": "driver", "image": "test/driver:1"}],
                }
            },
        },
    }
    api.create(JOBS, job, NS)

    def running(obj: dict[str, Any]) -> bool:
        return (obj.get("status") or {}).get("phase") == "Running"

    cluster.wait_for_object(PODS, "agent", NS, running)
    cluster.wait_for(
        lambda: [p for p in api.list(PODS, NS, labelSelector="job-name=upgrade")[0] if running(p)]
    )
    old_boot = api.get(NODES, "nvidia-0")["status"]["nodeInfo"]["bootID"]
    new_boot = cluster.reboot_node("nvidia-0")
    assert new_boot != old_boot

    def restarted(obj: dict[str, Any]) -> bool:
        status = obj["status"]["containerStatuses"][0]
        return bool(status["restartCount"] == 1 and "running" in status["state"])

    agent = cluster.wait_for_object(PODS, "agent", NS, restarted)
    assert agent["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "Unknown"

    def failed(obj: dict[str, Any]) -> bool:
        return any(c["type"] == "Failed" for c in (obj.get("status") or {}).get("conditions") or [])

    cluster.wait_for_object(JOBS, "upgrade", NS, failed)
    (pod,) = api.list(PODS, NS, labelSelector="job-name=upgrade")[0]
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 255


def test_fake_reboot_from_outside_a_pod_returns_and_the_node_reboots(cluster: SimCluster) -> None:
    import time

    api = cluster.api()
    root = cluster.node("amd-0").root
    old_boot = api.get(NODES, "amd-0")["status"]["nodeInfo"]["bootID"]
    boots = hostfakes.boots(root)
    started = time.monotonic()
    assert run(root, "reboot") == 0
    assert time.monotonic() - started < 5  # no pod to kill: it does not wait

    def rebooted(node: dict[str, Any]) -> bool:
        return bool(node["status"]["nodeInfo"]["bootID"] != old_boot)

    cluster.wait_for_object(NODES, "amd-0", None, rebooted, timeout=20)
    cluster.wait_for(lambda: hostfakes.boots(root) == boots + 1, 10, what="the host root's boot")
