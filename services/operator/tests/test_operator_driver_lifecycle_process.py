"""The driver's whole life through the operator's Jobs, in process mode, on one shared cluster: two
simulated nodes with their GPUs on the PCI bus and no driver. Each Job's pod runs the real
`gpuop-operator playbook` (real Ansible) with the host commands going to the recording fakes.

1. `driver.enable: true`: every node's install Job completes, with the privileges a real node
   needs (root, host PID and network namespaces with cluster DNS, privileged), and the node's
   driver stage is done;
2. a version change upgrades each node in turn: new version label, the fakes hold the new install;
3. `enable: false` with `uninstallPolicy: Uninstall`: the real driver-uninstall playbook runs
   through its Job on every node, the driver is gone from the host, and so are gpuop's driver
   labels and annotations; the nodes are schedulable again.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.gpu.amd import AmdSysfsBackend
from gpuop_operator.driverflow import VERSION_LABEL
from gpuop_operator.driverjob import JobSettings
from gpuop_operator.upgrade import STATE_LABEL
from gpuop_sim import hostfakes
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import JOBS, NODES, PODS, Resource

pytestmark = pytest.mark.slow
NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
MARKER = "var/lib/gpuop/driver/amd.json"  # what the install playbook leaves on the host
JOBS_VIA_FAKES = JobSettings(
    namespace=NAMESPACE,
    release="gpuop",
    image="gpuop/gpuop-operator:0.1.0",
    host_exec=f"{sys.executable} -m gpuop_sim.hostfakes --root {{host_root}}",
    deadline_seconds=600,
)
# One node at a time, and the one in flight may be the only one down.
POLICY = {"rebootRequired": False, "maxParallelUpgrades": 1, "maxUnavailableNodes": 1}


@pytest.fixture(scope="module")
def cluster(kit: Any) -> Iterator[SimCluster]:
    with SimCluster(profiles=["amd-single", "amd-single"], pods="process", driver_loaded=False) as sim:
        kit.install_operands(sim.api(), ("node-labeller",))
        yield sim


def spec(driver: dict[str, Any]) -> dict[str, Any]:
    return {"driver": {"upgradePolicy": POLICY, **driver}, "devicePlugin": {"enable": False}}


def labels(cluster: SimCluster, node: str) -> dict[str, str]:
    return dict(cluster.api().get(NODES, node)["metadata"]["labels"])


def complete(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


def marker(root: Path) -> dict[str, Any]:
    return dict(json.loads((root / MARKER).read_text()))


def installs(root: Path) -> int:
    """`apt-get install` calls of the amdgpu package (`amdgpu-dkms=<exact version>`) the fakes
    recorded on this host."""
    return sum(
        1
        for argv in hostfakes.recorded(root)
        if argv[:2] == ["apt-get", "install"] and any(a.startswith("amdgpu-dkms=") for a in argv)
    )


def test_enabling_the_driver_installs_it_on_every_node_through_privileged_jobs(
    cluster: SimCluster, kit: Any
) -> None:
    api = cluster.api()
    names = [node.name for node in cluster.nodes]
    assert all(AmdSysfsBackend(node.root).enumerate() == [] for node in cluster.nodes)  # no driver yet
    with kit.operator_running(cluster, jobs=JOBS_VIA_FAKES):
        api.create(
            DEVICECONFIGS, kit.device_config(spec=spec({"enable": True, "version": "6.12"})), NAMESPACE
        )
        cluster.wait_for(
            lambda: all(labels(cluster, n).get("gpuop.dev/deploy.node-labeller") == "true" for n in names),
            timeout=300,
            what="the driver stage done on every node (its operands follow)",
        )
    selector = "gpuop.dev/operation=driver-install"
    jobs = {
        j["metadata"]["annotations"]["gpuop.dev/node"]: j
        for j in api.list(JOBS, NAMESPACE, labelSelector=selector)[0]
    }
    assert sorted(jobs) == sorted(names) and all(complete(j) for j in jobs.values())
    for node in cluster.nodes:
        assert labels(cluster, node.name)[VERSION_LABEL] == "6.12"
        assert marker(node.root)["version"] == "6.12"
        assert marker(node.root)["package_version"] == hostfakes.amd_dkms_version("6.12")
        assert installs(node.root) == 1
        assert [g.pci_address for g in AmdSysfsBackend(node.root).enumerate()]  # modprobe laid the tree
        pods, _ = api.list(PODS, NAMESPACE, labelSelector=f"job-name={jobs[node.name]['metadata']['name']}")
        assert [p["status"]["phase"] for p in pods] == ["Succeeded"]
        pod_spec = pods[0]["spec"]
        assert pod_spec["nodeName"] == node.name
        assert pod_spec["hostPID"] is True and pod_spec["hostNetwork"] is True
        assert pod_spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        security = pod_spec["containers"][0]["securityContext"]
        assert security["privileged"] is True and security["runAsUser"] == 0


def test_a_version_change_upgrades_each_node_to_the_new_driver(cluster: SimCluster, kit: Any) -> None:
    api = cluster.api()
    installs_before = {n.name: installs(n.root) for n in cluster.nodes}
    with kit.operator_running(cluster, jobs=JOBS_VIA_FAKES):
        api.patch(DEVICECONFIGS, "gpus", {"spec": spec({"enable": True, "version": "6.13"})}, NAMESPACE)
        cluster.wait_for(
            lambda: all(labels(cluster, n.name).get(STATE_LABEL) == "upgrade-done" for n in cluster.nodes),
            timeout=300,
            what="upgrade-done on every node",
        )
    for node in cluster.nodes:
        assert labels(cluster, node.name)[VERSION_LABEL] == "6.13"
        assert marker(node.root)["version"] == "6.13"
        assert installs(node.root) == installs_before[node.name] + 1  # the playbook ran once more
        # What the package manager has, not what the playbook wrote: 6.13's own amdgpu-dkms.
        assert marker(node.root)["package_version"] == hostfakes.amd_dkms_version("6.13")
        assert "6.13" in (node.root / "etc/apt/sources.list.d/amdgpu.list").read_text()
        assert not api.get(NODES, node.name)["spec"].get("unschedulable")


def test_disabling_with_uninstall_policy_uninstall_takes_the_driver_off_every_node(
    cluster: SimCluster, kit: Any
) -> None:
    api = cluster.api()
    with kit.operator_running(cluster, jobs=JOBS_VIA_FAKES):
        api.patch(
            DEVICECONFIGS,
            "gpus",
            {"spec": spec({"enable": False, "uninstallPolicy": "Uninstall"})},
            NAMESPACE,
        )
        cluster.wait_for(
            lambda: all(
                VERSION_LABEL not in (node := labels(cluster, n.name)) and STATE_LABEL not in node
                for n in cluster.nodes
            ),
            timeout=300,
            what="the driver off every node",
        )
    for node in cluster.nodes:
        commands = hostfakes.recorded(node.root)
        assert ["modprobe", "-r", "amdgpu"] in commands and [
            "apt-get",
            "purge",
            "-y",
            "amdgpu-dkms",
        ] in commands
        assert not (node.root / MARKER).exists()
        assert not (node.root / "sys/module/amdgpu/initstate").exists()  # the module is unloaded
        assert AmdSysfsBackend(node.root).enumerate() == []
        obj = api.get(NODES, node.name)
        annotations = obj["metadata"].get("annotations") or {}
        assert not [
            k for k in annotations if k.startswith(("gpuop.dev/driver-upgrade.", "gpuop.dev/driver."))
        ]
        assert not obj["spec"].get("unschedulable")
        assert obj["metadata"]["labels"].get("gpuop.dev/deploy.node-labeller") == "true"  # resumed
    selector = "gpuop.dev/operation=driver-uninstall"
    assert api.list(JOBS, NAMESPACE, labelSelector=selector)[0] == []  # each deleted once done
