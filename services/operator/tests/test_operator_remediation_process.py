"""Remediation end to end in process mode: the real node labeller publishes `GPUHealthy=False` for a
RAS fault on a simulated node, the operator taints and drains it and runs the real `gpu-reset`
playbook (ansible-runner in the Job's pod, host commands to the recording fakes, whose `amd-smi
reset` clears the fault), the labeller sees the GPU healthy again, and the node is given back.
"""

from __future__ import annotations

import json
import re
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from gpuop_common.gpu.amd import AmdSysfsBackend
from gpuop_operator.driverjob import JobSettings
from gpuop_operator.remediation import STATE_LABEL
from gpuop_sim import hostfakes
from gpuop_sim.cluster import SimCluster, SimNode
from gpuop_sim.nodes import break_gpu
from gpuop_sim.workloads.kubeapi import DAEMONSETS, NODES, Resource

pytestmark = pytest.mark.slow
NAMESPACE = "gpu-operator"
LABELLER_PORT = 8082  # the node labeller's probe and metrics port (docs/charts.md)
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
JOBS_VIA_FAKES = JobSettings(
    namespace=NAMESPACE,
    release="gpuop",
    image="gpuop/gpuop-operator:0.1.0",
    host_exec=f"{sys.executable} -m gpuop_sim.hostfakes --root {{host_root}}",
    deadline_seconds=600,
)


@pytest.fixture(scope="module")
def cluster(kit: Any) -> Iterator[SimCluster]:
    with SimCluster(profiles=["amd-mi210x8"], pods="process") as sim:
        kit.install_operands(sim.api(), ("node-labeller",))
        # This DaemonSet mounts no config file: the labeller's resync (which reads GPU health) comes
        # from its flag, 2 s instead of the default 60 s, so a fault and its repair show at once.
        patch = [{"op": "add", "path": "/spec/template/spec/containers/0/args", "value": ["--interval=2"]}]
        sim.api().patch(
            DAEMONSETS, "gpuop-node-labeller", patch, NAMESPACE, content_type="application/json-patch+json"
        )
        yield sim


SPEC = {
    "devicePlugin": {"enable": False},
    "nodeLabeller": {"enable": True},
    "remediation": {"enable": True, "conditionHoldSeconds": 0, "resetClearSeconds": 60},
}


def ensure_device_config(cluster: SimCluster, kit: Any) -> None:
    api = cluster.api()
    if not api.list(DEVICECONFIGS, NAMESPACE)[0]:
        api.create(DEVICECONFIGS, kit.device_config(spec=SPEC), NAMESPACE)


def gpu_healthy(cluster: SimCluster, node: str) -> str | None:
    conditions = cluster.api().get(NODES, node)["status"].get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "GPUHealthy"), None)


def test_a_ras_fault_the_labeller_sees_is_reset_by_the_real_playbook_and_the_node_given_back(
    cluster: SimCluster, kit: Any
) -> None:
    node = cluster.nodes[0]
    api = cluster.api()
    with kit.operator_running(cluster, jobs=JOBS_VIA_FAKES):
        ensure_device_config(cluster, kit)
        cluster.wait_for(
            lambda: gpu_healthy(cluster, node.name) == "True", timeout=120, what="GPUHealthy=True"
        )
        gpu = AmdSysfsBackend(node.root).enumerate()[2].pci_address
        break_gpu(node.root, gpu, "ras")
        cluster.wait_for(
            lambda: api.get(NODES, node.name)["metadata"]["labels"].get(STATE_LABEL) == "recovered",
            timeout=240,
            what=f"{node.name} recovered",
        )
    final = api.get(NODES, node.name)
    assert gpu_healthy(cluster, node.name) == "True"
    assert not final["spec"].get("unschedulable")
    assert not [t for t in final["spec"].get("taints") or [] if t["key"] == "gpuop.dev/gpu-unhealthy"]
    resets = [c for c in hostfakes.recorded(node.root) if c[:2] == ["amd-smi", "reset"]]
    assert resets and gpu in resets[0]  # the GPU the labeller named, and only it

    def reasons(events: list[dict[str, Any]]) -> list[str]:
        return [e["reason"] for e in events if e["involvedObject"]["name"] == node.name]

    seen = reasons(
        cluster.wait_for_events(
            "default", lambda events: "RemediationSucceeded" in reasons(events), what="RemediationSucceeded"
        )
    )
    assert "RemediationRebooting" not in seen


def labeller_passes(node: SimNode) -> int:
    """The node labeller's finished passes, from its metrics (on its probe port, at the node's address)."""
    try:
        with urllib.request.urlopen(f"http://{node.address}:{LABELLER_PORT}/metrics", timeout=5) as reply:
            text = reply.read().decode()
    except OSError:
        return -1  # restarting (after the last test's reboot)
    found = re.search(r'^gpuop_node_labeller_passes_total\{result="ok"\} ([0-9.e+]+)$', text, re.M)
    return int(float(found.group(1))) if found else -1


def test_a_fault_the_reset_cannot_clear_reboots_the_node_through_the_real_playbooks(
    cluster: SimCluster, kit: Any
) -> None:
    node = cluster.nodes[0]
    api = cluster.api()
    boot = api.get(NODES, node.name)["status"]["nodeInfo"]["bootID"]
    runs = len(history(cluster, node.name))
    with kit.operator_running(cluster, jobs=JOBS_VIA_FAKES):
        ensure_device_config(cluster, kit)
        cluster.wait_for(
            lambda: gpu_healthy(cluster, node.name) == "True", timeout=120, what="GPUHealthy=True"
        )
        # The last run's reset told the labeller to re-take its health baseline; a fault injected
        # before it did so would be in that baseline, unseen. Two passes from now: one began after.
        start = cluster.wait_for(lambda: labeller_passes(node) + 1, timeout=60, what="labeller metrics") - 1
        cluster.wait_for(lambda: labeller_passes(node) >= start + 2, timeout=60, what="two labeller passes")
        gpu = AmdSysfsBackend(node.root).enumerate()[5].pci_address
        break_gpu(node.root, gpu, "ras", needs_reboot=True)
        cluster.wait_for(
            lambda: len(history(cluster, node.name)) == runs + 1,
            timeout=300,
            what=f"a second run of {node.name} finished",
        )
    run = history(cluster, node.name)[-1]
    assert run["result"] == "recovered", run
    assert run["steps"] == ["drain", "reset", "reboot", "validate"]
    assert api.get(NODES, node.name)["status"]["nodeInfo"]["bootID"] != boot
    assert gpu_healthy(cluster, node.name) == "True"
    assert not api.get(NODES, node.name)["spec"].get("unschedulable")


def history(cluster: SimCluster, node: str) -> list[dict[str, Any]]:
    annotations = cluster.api().get(NODES, node)["metadata"].get("annotations") or {}
    runs: list[dict[str, Any]] = json.loads(annotations.get("gpuop.dev/remediation.history", "[]"))
    return runs
