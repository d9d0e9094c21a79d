"""Per-GPU health through the kubelet: one GPU flips within 1 s, the others stay Healthy."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.config import DevicePluginConfig
from gpuop_common.gpu.amd_topology import read_topology
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo, inject_xid, raise_ras, remove_file, set_kfd_property, vanish_gpu

MakeRoot = Callable[..., NodeRootInfo]
StartPlugin = Callable[..., Any]
FLIP_DEADLINE_S = 1.0


def started(kubelet: KubeletEmulator, resource: str, count: int) -> dict[str, str]:
    kubelet.wait_for(lambda: kubelet.allocatable().get(resource) == count, timeout=15)
    return kubelet.resources()[resource]


def wait_health(kubelet: KubeletEmulator, resource: str, device: str, health: str) -> float:
    """Seconds until the kubelet sees `device` in `health` (fails past the 1 s deadline + slack)."""
    start = time.monotonic()
    kubelet.wait_for(lambda: kubelet.resources()[resource].get(device) == health, timeout=5)
    return time.monotonic() - start


def others_healthy(kubelet: KubeletEmulator, resource: str, device: str) -> bool:
    return all(h == "Healthy" for d, h in kubelet.resources()[resource].items() if d != device)


def kfd_node_of(root: Path, bdf: str) -> int:
    return next(int(n.path.name) for n in read_topology(root) if n.is_gpu and n.parent_bdf == bdf)


@pytest.mark.parametrize("fault", ["vanish", "gfx_target_version", "device_node", "ras"])
def test_one_amd_gpu_turns_unhealthy_within_a_second_and_recovers(
    fault: str, gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi210x8")
    run_plugin(info, health_interval=0.25)
    devices = started(kubelet_emulator, "amd.com/gpu", 8)
    victim = sorted(devices)[2]
    undo: Callable[[], object]
    if fault == "vanish":
        undo = vanish_gpu(info.root, victim).restore
    elif fault == "gfx_target_version":
        node = kfd_node_of(info.root, victim)
        props = (info.root / f"sys/class/kfd/kfd/topology/nodes/{node}/properties").read_text()
        original = int(
            next(line.split()[1] for line in props.splitlines() if line.startswith("gfx_target_version"))
        )
        set_kfd_property(info.root, node, "gfx_target_version", 0)

        def undo() -> None:
            set_kfd_property(info.root, node, "gfx_target_version", original)
    elif fault == "device_node":
        pci = (info.root / "sys/bus/pci/devices" / victim).resolve()
        drm = sorted((info.root / "sys/class/drm").iterdir())
        render = next(d for d in drm if d.name.startswith("renderD") and (d / "device").resolve() == pci)
        saved = (info.root / "dev/dri" / render.name).read_bytes()
        remove_file(info.root, f"dev/dri/{render.name}")

        def undo() -> None:
            (info.root / "dev/dri" / render.name).write_bytes(saved)
    else:
        raise_ras(info.root, victim, "umc", by=1)

        def undo() -> None:
            """RAS errors do not go away; a driver reload resets the counter below the baseline."""
            path = next((info.root / "sys/bus/pci/devices" / victim).resolve().glob("ras/umc_err_count"))
            path.write_text("ue: 0\nce: 0\n")

    assert wait_health(kubelet_emulator, "amd.com/gpu", victim, "Unhealthy") <= FLIP_DEADLINE_S
    assert others_healthy(kubelet_emulator, "amd.com/gpu", victim)
    assert kubelet_emulator.allocatable() == {"amd.com/gpu": 7}
    assert kubelet_emulator.capacity() == {"amd.com/gpu": 8}  # listed, not dropped
    undo()
    wait_health(kubelet_emulator, "amd.com/gpu", victim, "Healthy")
    assert kubelet_emulator.allocatable() == {"amd.com/gpu": 8}


def test_one_cpx_partition_vanishing_flips_only_that_partition(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi300x-cpx")
    run_plugin(info, DevicePluginConfig(resource_naming_strategy="mixed"), health_interval=0.25)
    started(kubelet_emulator, "amd.com/cpx_nps4", 63)
    victim_gpu = info.pci_addresses[1]
    vanished = vanish_gpu(info.root, victim_gpu)
    parts = 8  # every partition of that GPU
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("amd.com/cpx_nps4") == 63 - parts, 5)
    unhealthy = {d for d, h in kubelet_emulator.resources()["amd.com/cpx_nps4"].items() if h != "Healthy"}
    assert victim_gpu in unhealthy and len(unhealthy) == parts
    vanished.restore()
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("amd.com/cpx_nps4") == 63, 5)


def test_nvidia_critical_xid_flips_one_gpu_and_ignored_xids_do_not(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("nvidia-h100x8")
    run_plugin(info, health_interval=0.25)
    devices = started(kubelet_emulator, "nvidia.com/gpu", 8)
    ignored, victim = sorted(devices)[0], sorted(devices)[5]
    inject_xid(info.root, ignored, 13)  # application error: ignored like NVIDIA's plugin does
    inject_xid(info.root, victim, 79)  # fallen off the bus
    assert wait_health(kubelet_emulator, "nvidia.com/gpu", victim, "Unhealthy") <= FLIP_DEADLINE_S
    assert others_healthy(kubelet_emulator, "nvidia.com/gpu", victim)
    assert kubelet_emulator.resources()["nvidia.com/gpu"][ignored] == "Healthy"


def test_lost_nvidia_gpu_turns_unhealthy(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("nvidia-h100x8")
    run_plugin(info, health_interval=0.25)
    victim = sorted(started(kubelet_emulator, "nvidia.com/gpu", 8))[3]
    vanished = vanish_gpu(info.root, victim)
    assert wait_health(kubelet_emulator, "nvidia.com/gpu", victim, "Unhealthy") <= FLIP_DEADLINE_S
    assert others_healthy(kubelet_emulator, "nvidia.com/gpu", victim)
    vanished.restore()
    wait_health(kubelet_emulator, "nvidia.com/gpu", victim, "Healthy")


def test_without_automatic_recovery_a_failed_gpu_stays_unhealthy(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi210x8")
    config = DevicePluginConfig.model_validate({"health": {"recoverAutomatically": False}})
    handle = run_plugin(info, config, health_interval=0.1)
    victim = sorted(started(kubelet_emulator, "amd.com/gpu", 8))[0]
    vanished = vanish_gpu(info.root, victim)
    wait_health(kubelet_emulator, "amd.com/gpu", victim, "Unhealthy")
    vanished.restore()
    # Several polls after the GPU is back, it is still Unhealthy.
    for _ in range(3):
        handle.service.tick()
    assert kubelet_emulator.resources()["amd.com/gpu"][victim] == "Unhealthy"


def test_ras_within_the_threshold_is_tolerated(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi210x8")
    config = DevicePluginConfig.model_validate({"health": {"rasUncorrectableThreshold": 2}})
    handle = run_plugin(info, config, health_interval=0.1)
    victim = sorted(started(kubelet_emulator, "amd.com/gpu", 8))[1]
    raise_ras(info.root, victim, by=2)
    handle.service.tick()
    handle.service.tick()
    assert kubelet_emulator.resources()["amd.com/gpu"][victim] == "Healthy"
    raise_ras(info.root, victim, by=1)
    wait_health(kubelet_emulator, "amd.com/gpu", victim, "Unhealthy")


def test_health_checks_disabled_keeps_everything_healthy(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi210x8")
    handle = run_plugin(
        info, DevicePluginConfig.model_validate({"health": {"enable": False}}), health_interval=0.1
    )
    victim = sorted(started(kubelet_emulator, "amd.com/gpu", 8))[0]
    raise_ras(info.root, victim)
    handle.service.tick()
    assert set(kubelet_emulator.resources()["amd.com/gpu"].values()) == {"Healthy"}


def test_updates_are_sent_only_on_change(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi210x8")
    handle = run_plugin(info, health_interval=0.1)
    started(kubelet_emulator, "amd.com/gpu", 8)
    view = handle.service.servers["amd.com/gpu"].view
    version = view.snapshot.version
    for _ in range(5):
        handle.service.tick()
    assert view.snapshot.version == version
    raise_ras(info.root, info.pci_addresses[0])
    handle.service.tick()
    assert view.snapshot.version == version + 1
