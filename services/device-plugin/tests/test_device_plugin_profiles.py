"""Health flip, kubelet restart and bad requests on every GPU node profile, through the emulator."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from gpuop_common.config import DevicePluginConfig
from gpuop_common.gpu import open_backends
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import dial_unix
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo, vanish_gpu

MakeRoot = Callable[..., NodeRootInfo]
StartPlugin = Callable[..., Any]

MIXED = DevicePluginConfig(resource_naming_strategy="mixed")
MIG_MIXED = DevicePluginConfig(mig_strategy="mixed")
# profile -> (config, resource, device count, socket file)
PROFILES: dict[str, tuple[DevicePluginConfig, str, int, str]] = {
    "amd-mi210x8": (DevicePluginConfig(), "amd.com/gpu", 8, "amd.com_gpu"),
    "amd-mi300x-cpx": (MIXED, "amd.com/cpx_nps4", 63, "amd.com_cpx_nps4"),
    "amd-mi300x-spx": (MIXED, "amd.com/spx_nps1", 8, "amd.com_spx_nps1"),
    "amd-single": (DevicePluginConfig(), "amd.com/gpu", 1, "amd.com_gpu"),
    "amd-radeon": (DevicePluginConfig(), "amd.com/gpu", 1, "amd.com_gpu"),
    "nvidia-h100x8": (DevicePluginConfig(), "nvidia.com/gpu", 8, "nvidia-gpu.sock"),
    "nvidia-h100x8-mig": (MIG_MIXED, "nvidia.com/mig-1g.10gb", 8, "nvidia-mig-1g.10gb.sock"),
}  # fmt: skip


def physical_gpu_of(info: NodeRootInfo, device: str) -> tuple[str, set[str]]:
    """(what vanish_gpu takes, every device id on that GPU) for an advertised device id."""
    for gpu in open_backends(info.root)[0].enumerate():
        ids = {gpu.pci_address, gpu.id} | {p.id for p in gpu.partitions} | {m.uuid for m in gpu.mig_devices}
        if device in ids:
            return (gpu.pci_address if gpu.vendor == "amd" else gpu.id), ids
    raise AssertionError(f"{device} is on no GPU")


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_health_flip_restart_and_bad_request(
    profile: str,
    gpu_node_root: MakeRoot,
    run_plugin: StartPlugin,
    kubelet_emulator: KubeletEmulator,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config, resource, count, socket = PROFILES[profile]
    info = gpu_node_root(profile)
    handle = run_plugin(info, config, health_interval=0.25)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(resource) == count, timeout=15)

    # One GPU fails: only its devices turn Unhealthy, within a second.
    victim = sorted(kubelet_emulator.resources()[resource])[-1]
    target, on_gpu = physical_gpu_of(info, victim)
    start = time.monotonic()
    vanished = vanish_gpu(info.root, target)
    kubelet_emulator.wait_for(
        lambda: kubelet_emulator.resources()[resource][victim] == "Unhealthy", timeout=5
    )
    assert time.monotonic() - start <= 1.0
    states = kubelet_emulator.resources()[resource]
    assert {d for d, h in states.items() if h != "Healthy"} == on_gpu & set(states)
    vanished.restore()
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(resource) == count, timeout=5)

    # The kubelet restarts: the plugin re-registers on the new kubelet.sock without restarting.
    kubelet_emulator.restart()
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(resource) == count, timeout=10)
    kubelet_emulator.wait_for(lambda: handle.service.registered, timeout=5)

    # A bad request names the bad id and allocates nothing.
    good = sorted(kubelet_emulator.resources()[resource])[0]
    with dial_unix(Path(kubelet_emulator.socket_dir) / socket, timeout=5) as channel:
        stub = dp.DevicePluginStub(channel)
        request = dp.AllocateRequest(
            container_requests=[dp.ContainerAllocateRequest(devices_ids=[good, "no-such"])]
        )
        with pytest.raises(grpc.RpcError) as err:
            stub.Allocate(request, timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "no-such" in (err.value.details() or "")
    assert kubelet_emulator.allocate(resource, 1).device_ids
