"""The GPUHealthy Node condition: its content from backend health (pure), and on the simulated API
server through faults, GPU resets and the operator's re-baseline annotation, written only on change."""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.gpu import AmdSysfsBackend, GpuHealth, HealthReason, PartitionHealth
from gpuop_node_labeller import LabelOptions, agent
from gpuop_node_labeller.agent import HEALTH_RESET_ANNOTATION, NodeLabeller
from gpuop_node_labeller.health import (
    MAX_MESSAGE,
    REASON_PATTERN,
    condition_patch,
    gpu_condition,
    reason_word,
    unreadable_condition,
)
from gpuop_sim import hostfakes
from gpuop_sim.nodes import NodeRootInfo, amd_driver, break_gpu, inject_xid, set_kfd_property
from gpuop_sim.workloads.kubeapi import KubeRest
from gpuop_sim.workloads.simkubelet.nodestatus import mark_not_ready, mark_ready

NodeGpus = Callable[..., tuple[NodeRootInfo, list[Any]]]
SCRIPT = Path(sys.executable).parent / "gpuop-node-labeller"


# content -----------------------------------------------------------------------------------------
def test_healthy_gpus_give_true() -> None:
    got = gpu_condition([GpuHealth("a"), GpuHealth("b")], {})
    assert (got.status, got.reason, got.message, got.unhealthy) == (
        "True",
        "GPUsHealthy",
        "all 2 GPUs healthy",
        (),
    )


def test_unhealthy_gpus_are_named_by_pci_address_with_every_reason() -> None:
    health = [
        GpuHealth("gpu-b", (HealthReason("ras_uncorrectable_increase", "RAS block umc: rose from 0 to 1"),)),
        GpuHealth("gpu-a", (HealthReason("kfd_node_vanished", "GPU 0000:03:00.0 has no KFD node"),)),
        GpuHealth("gpu-c"),
        GpuHealth(
            "gpu-d", (), (PartitionHealth("MIG-1", (HealthReason("xid_critical", "critical XID 48"),)),)
        ),
        GpuHealth("GPU-lost", (HealthReason("device_lost", "GPU GPU-lost is no longer visible to NVML"),)),
    ]
    pci = {"gpu-a": "0000:03:00.0", "gpu-b": "0000:83:00.0", "gpu-d": "0000:c3:00.0"}
    got = gpu_condition(health, pci)
    assert got.status == "False"
    assert got.reason == "DeviceLost,KfdNodeVanished,RasUncorrectableIncrease,XidCritical"
    assert REASON_PATTERN.match(got.reason)
    assert got.message == (
        "4 of 5 GPUs unhealthy: 0000:03:00.0: GPU 0000:03:00.0 has no KFD node; "
        "0000:83:00.0: RAS block umc: rose from 0 to 1; 0000:c3:00.0: partition MIG-1: critical XID 48; "
        "GPU-lost: GPU GPU-lost is no longer visible to NVML"  # a GPU never seen keeps its backend id
    )
    assert got.unhealthy == ("0000:03:00.0", "0000:83:00.0", "0000:c3:00.0", "GPU-lost")


@pytest.mark.parametrize(
    ("code", "word"),
    [
        ("ras_uncorrectable_increase", "RasUncorrectableIncrease"),
        ("xid-critical.79", "XidCritical79"),
        ("79_xid", "Gpu79Xid"),
        ("", "Unknown"),
        ("__", "Unknown"),
        ("naïve code!", "NaVeCode"),
    ],
)
def test_reason_codes_become_legal_condition_reasons(code: str, word: str) -> None:
    assert reason_word(code) == word
    got = gpu_condition([GpuHealth("x", (HealthReason(code, "why"),))], {})
    assert REASON_PATTERN.match(got.reason), got.reason


def test_many_unhealthy_gpus_keep_the_message_bounded_and_count_the_rest() -> None:
    health = [GpuHealth(f"g{i}", (HealthReason(f"code_{i}", "x" * 200),)) for i in range(64)]
    got = gpu_condition(health, {})
    assert len(got.message) <= MAX_MESSAGE
    assert got.message.endswith("more)")
    assert len(got.reason) <= 1024 and REASON_PATTERN.match(got.reason)


def test_condition_patch_only_on_change_and_transition_time_only_on_status_change() -> None:
    false = gpu_condition(
        [GpuHealth("a", (HealthReason("xid_critical", "critical XID 79"),))], {"a": "0000:01:00.0"}
    )
    node: dict[str, Any] = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    first = condition_patch(node, false, "2026-01-01T00:00:00Z")
    assert first is not None
    written = first["status"]["conditions"][0]
    assert written == {
        "type": "GPUHealthy",
        "status": "False",
        "reason": "XidCritical",
        "message": "1 of 1 GPUs unhealthy: 0000:01:00.0: critical XID 79",
        "lastHeartbeatTime": "2026-01-01T00:00:00Z",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    node["status"]["conditions"].append(written)
    assert condition_patch(node, false, "2026-01-01T00:05:00Z") is None
    worse = gpu_condition(
        [
            GpuHealth(
                "a", (HealthReason("xid_critical", "critical XID 79"), HealthReason("device_lost", "gone"))
            )
        ],
        {},
    )
    same_status = condition_patch(node, worse, "2026-01-01T00:06:00Z")
    assert same_status is not None
    changed = same_status["status"]["conditions"][0]
    assert changed["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert changed["lastHeartbeatTime"] == "2026-01-01T00:06:00Z"
    recovered = condition_patch(node, gpu_condition([GpuHealth("a")], {}), "2026-01-01T00:07:00Z")
    assert recovered is not None
    assert recovered["status"]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:07:00Z"


def test_unreadable_health_is_unknown_naming_the_error() -> None:
    got = unreadable_condition("/sys/class/kfd: Permission denied")
    assert (got.status, got.reason) == ("Unknown", "GPUHealthUnreadable")
    assert "/sys/class/kfd: Permission denied" in got.message


# on the simulated API server ---------------------------------------------------------------------
def condition(nodes: Any, name: str = "gpu-node") -> dict[str, Any]:
    node = nodes.core.read_node(name)
    found = [c for c in node.status.conditions or [] if c.type == "GPUHealthy"]
    assert len(found) == 1, node.status.conditions
    c = found[0]
    return {"status": c.status, "reason": c.reason, "message": c.message, "since": c.last_transition_time}


def status_patches(server: Any) -> int:
    return sum(1 for r in server.requests() if r.method == "PATCH" and r.path.endswith("/status"))


def labeller_for(info: NodeRootInfo, api: Any) -> NodeLabeller:
    options = LabelOptions()
    return NodeLabeller(host_root=info.root, node_name="gpu-node", api=api, options=lambda: options)


def fake(root: Path, *argv: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return hostfakes.main(["--root", str(root), *argv])


def test_ras_fault_turns_the_condition_false_and_a_labeller_restarted_after_the_reset_brings_it_back(
    node_gpus: NodeGpus, nodes: Any, kube_api_client: Any, sim_apiserver: Any
) -> None:
    info, _ = node_gpus("amd-mi210x8", "gpu-node")
    nodes.create("gpu-node")
    labeller = labeller_for(info, kube_api_client)
    assert labeller.run_once().condition_written
    assert condition(nodes)["status"] == "True"
    assert condition(nodes)["reason"] == "GPUsHealthy"
    assert condition(nodes)["message"] == "all 8 GPUs healthy"

    gpu = info.pci_addresses[2]
    break_gpu(info.root, gpu, "ras")
    assert labeller.run_once().condition_written
    broken = condition(nodes)
    assert (broken["status"], broken["reason"]) == ("False", "RasUncorrectableIncrease")
    assert broken["message"].startswith(f"1 of 8 GPUs unhealthy: {gpu}: RAS block umc")
    before = status_patches(sim_apiserver)
    for _ in range(3):  # steady state: nothing written
        assert not labeller.run_once().condition_written
    assert status_patches(sim_apiserver) == before
    assert labeller.metrics.registry.get_sample_value("gpuop_node_labeller_unhealthy_gpus") == 1

    assert fake(info.root, "amd-smi", "reset", "-G", "-g", gpu) == 0
    # amdgpu keeps RAS counts across a GPU reset (a driver reload or a boot clears them): the
    # labeller that watched the rise still sees it.
    assert not labeller.run_once().condition_written
    assert condition(nodes)["status"] == "False"
    labeller.close()
    # Remediation pauses the node's operands around the reset; the labeller that comes back takes
    # the counts it finds as its baseline, and the GPU is healthy again.
    labeller = labeller_for(info, kube_api_client)
    assert labeller.run_once().condition_written
    assert condition(nodes)["status"] == "True"
    assert labeller.metrics.registry.get_sample_value("gpuop_node_labeller_condition_patches_total") == 1
    labeller.close()


def test_vanished_gpu_is_named_even_after_the_backends_reopen(
    node_gpus: NodeGpus, nodes: Any, kube_api_client: Any
) -> None:
    info, _ = node_gpus("amd-mi300x-cpx", "gpu-node")
    nodes.create("gpu-node")
    labeller = labeller_for(info, kube_api_client)
    labeller.run_once()
    gpu = info.pci_addresses[5]
    break_gpu(info.root, gpu, "vanished")
    labeller.invalidate()  # the udev event of a GPU leaving the bus
    labeller.run_once()
    got = condition(nodes)
    assert got["status"] == "False" and "GpuVanished" in got["reason"].split(",")
    assert f"{gpu}: GPU {gpu} has neither a DRM card nor a KFD node" in got["message"]
    assert fake(info.root, "amd-smi", "reset", "-G", "-g", gpu) == 0
    labeller.run_once()
    assert condition(nodes)["status"] == "True"
    labeller.close()


def test_nvidia_xid_stays_until_the_reset_is_announced(
    node_gpus: NodeGpus, nodes: Any, kube_api_client: Any
) -> None:
    info, _ = node_gpus("nvidia-h100x8", "gpu-node")
    nodes.create("gpu-node")
    labeller = labeller_for(info, kube_api_client)
    labeller.run_once()
    gpu = info.pci_addresses[4]
    inject_xid(info.root, gpu, 79)
    labeller.run_once()
    got = condition(nodes)
    assert (got["status"], got["reason"]) == ("False", "XidCritical")
    assert got["message"] == f"1 of 8 GPUs unhealthy: {gpu}: critical XID 79"
    assert fake(info.root, "nvidia-smi", "-r", "-i", gpu) == 0
    labeller.run_once()
    assert condition(nodes)["status"] == "False"  # an XID is sticky: the backend cannot see a reset
    nodes.core.patch_node("gpu-node", {"metadata": {"annotations": {HEALTH_RESET_ANNOTATION: "run-1"}}})
    labeller.run_once()
    assert condition(nodes)["status"] == "True"
    labeller.close()


def test_the_kubelets_status_updates_keep_the_condition(
    node_gpus: NodeGpus, nodes: Any, kube_api_client: Any, sim_kubeconfig: Path
) -> None:
    info, _ = node_gpus("amd-single", "gpu-node")
    nodes.create("gpu-node")
    labeller = labeller_for(info, kube_api_client)
    labeller.run_once()
    rest = KubeRest.from_kubeconfig(sim_kubeconfig)
    mark_not_ready(rest, "gpu-node", "2026-01-01T00:00:00Z", "rebooting")
    mark_ready(rest, "gpu-node", "10.0.0.9", "2026-01-01T00:01:00Z")
    types = [c.type for c in nodes.core.read_node("gpu-node").status.conditions]
    assert "GPUHealthy" in types and "Ready" in types
    labeller.close()


def test_console_script_once_publishes_the_condition(
    gpu_node_root: Callable[..., NodeRootInfo], nodes: Any, sim_kubeconfig: Path
) -> None:
    info = gpu_node_root("amd-radeon", "gpu-node")
    nodes.create("gpu-node")
    # A fault a fresh process sees at once (no baseline needed): KFD reports gfx_target_version 0.
    set_kfd_property(info.root, 1, "gfx_target_version", 0)
    done = subprocess.run(
        [
            str(SCRIPT), "--once", f"--host-root={info.root}", f"--kubeconfig={sim_kubeconfig}",
            "--probe-port=0", "--bind-address=127.0.0.1",
        ],
        capture_output=True, text=True, timeout=60, env={**os.environ, **info.env, "NODE_NAME": "gpu-node"},
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    got = condition(nodes)
    assert (got["status"], got["reason"]) == ("False", "GfxTargetVersionZero")
    assert info.pci_addresses[0] in got["message"]


def test_a_partition_switch_is_no_fault(node_gpus: NodeGpus, nodes: Any, kube_api_client: Any) -> None:
    info, _ = node_gpus("amd-mi300x-cpx", "gpu-node")
    nodes.create("gpu-node")
    labeller = labeller_for(info, kube_api_client)
    labeller.run_once()
    # What the config manager does, through the simulated amdgpu driver (re-lays the KFD nodes): the
    # CPX partitions of GPU 0 go, which a health baseline taken in CPX would call vanished.
    AmdSysfsBackend(info.root, writer=amd_driver.write_attr).set_partition_mode(
        info.pci_addresses[0], "spx_nps1"
    )
    labeller.run_once()
    assert condition(nodes)["status"] == "True", condition(nodes)
    labeller.close()


def test_unreadable_health_is_published_as_unknown_and_recovers(
    node_gpus: NodeGpus, nodes: Any, kube_api_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    info, _ = node_gpus("amd-radeon", "gpu-node")
    nodes.create("gpu-node")
    broken = {"on": True}

    class FlakyHealth(AmdSysfsBackend):
        def health(self) -> list[GpuHealth]:
            if broken["on"]:
                raise PermissionError(
                    13, "Permission denied", "/sys/class/kfd/kfd/topology/nodes/1/properties"
                )
            return super().health()

    monkeypatch.setattr(agent, "open_backends", lambda root, vendor, nvml=None: [FlakyHealth(root)])
    labeller = labeller_for(info, kube_api_client)
    result = labeller.run_once()
    assert result.labels  # the labels do not wait for health
    got = condition(nodes)
    assert (got["status"], got["reason"]) == ("Unknown", "GPUHealthUnreadable")
    assert "/sys/class/kfd/kfd/topology/nodes/1/properties" in got["message"]
    broken["on"] = False
    labeller.run_once()
    assert condition(nodes)["status"] == "True"
    labeller.close()
