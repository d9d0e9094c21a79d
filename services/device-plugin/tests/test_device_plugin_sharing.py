"""GPU sharing through the kubelet emulator: time-slicing on AMD and NVIDIA, per-model counts, MPS
with its control daemon, health of shared GPUs, re-advertising a changed config without a restart."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable
from typing import Any

import grpc
import pytest
from gpuop_common.config import DevicePluginConfig
from gpuop_common.gpu import GpuDevice, open_backends
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import dial_unix
from gpuop_device_plugin.inventory import build_plan
from gpuop_device_plugin.mps import daemon_start_argv, shm_mount_argv
from gpuop_device_plugin.mps_daemon import MpsCommandError, MpsControl, MpsDaemonManager
from gpuop_sim.hostfakes import mounts, mps_state, recorded
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo, inject_xid

MakeRoot = Callable[..., NodeRootInfo]
StartPlugin = Callable[..., Any]


def sharing(**sharing: Any) -> DevicePluginConfig:
    return DevicePluginConfig.model_validate({"sharing": sharing})


def wait_allocatable(kubelet: KubeletEmulator, expected: dict[str, int]) -> None:
    kubelet.wait_for(lambda: kubelet.allocatable() == expected, timeout=15)


@pytest.fixture
def node(gpu_node_root: MakeRoot, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], NodeRootInfo]:
    """A node root whose backends open in this process (the fake NVML's env set for the test)."""

    def make(profile: str) -> NodeRootInfo:
        info = gpu_node_root(profile)
        for key, value in info.env.items():
            monkeypatch.setenv(key, value)
        return info

    return make


def gpus_of(info: NodeRootInfo) -> list[GpuDevice]:
    return [gpu for backend in open_backends(info.root) for gpu in backend.enumerate()]


def base(device_id: str) -> str:
    return device_id.rsplit("::", 1)[0]


def test_mi210x8_with_four_replicas_is_32_amd_gpus_and_two_replicas_of_one_gpu_give_it_once(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    run_plugin(gpu_node_root("amd-mi210x8"), sharing(timeSlicing={"replicas": 4}))
    wait_allocatable(kubelet_emulator, {"amd.com/gpu": 32})
    ids = sorted(kubelet_emulator.resources()["amd.com/gpu"])
    assert len({base(i) for i in ids}) == 8
    same_gpu = [i for i in ids if base(i) == base(ids[0])][:2]
    response = kubelet_emulator.allocate("amd.com/gpu", same_gpu).response
    paths = [d.host_path for d in response.devices]
    assert len(paths) == len(set(paths)) == 3  # /dev/kfd, one card, one renderD: the GPU once
    assert "," not in response.envs["ROCR_VISIBLE_DEVICES"]


def test_preferred_allocation_spreads_replicas_over_gpus_before_stacking(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    run_plugin(gpu_node_root("amd-mi210x8"), sharing(timeSlicing={"replicas": 4}))
    wait_allocatable(kubelet_emulator, {"amd.com/gpu": 32})
    ids = sorted(kubelet_emulator.resources()["amd.com/gpu"])
    chosen = kubelet_emulator.get_preferred_allocation("amd.com/gpu", ids, [], 10)
    per_gpu = [sum(base(c) == b for c in chosen) for b in sorted({base(i) for i in ids})]
    assert sorted(per_gpu) == [1] * 6 + [2] * 2  # every GPU once, then the second round


def test_replica_counts_per_gpu_model(node: Callable[[str], NodeRootInfo]) -> None:
    gpus = gpus_of(node("nvidia-h100x8"))
    # Half the GPUs as another model, as on a node with two kinds of boards.
    mixed = [g if g.index < 4 else dataclasses.replace(g, model="NVIDIA H200") for g in gpus]
    config = sharing(
        timeSlicing={
            "replicas": 2,
            "models": [{"models": ["H200"], "replicas": 8}, {"models": ["A100"], "replicas": 3}],
        }
    )
    plan = build_plan(mixed, config)
    per_gpu = {base(d.id): 0 for d in plan.resources["nvidia.com/gpu"]}
    for device in plan.resources["nvidia.com/gpu"]:
        per_gpu[base(device.id)] += 1
    assert sorted(per_gpu.values()) == [2, 2, 2, 2, 8, 8, 8, 8]
    # Without a top-level count, GPUs of models no entry names are not shared.
    only = build_plan(mixed, sharing(timeSlicing={"models": [{"models": ["H200"], "replicas": 3}]}))
    assert len(only.resources["nvidia.com/gpu"]) == 4 * 3 + 4
    assert not build_plan(
        mixed, sharing(timeSlicing={"models": [{"models": ["H100"], "replicas": 3}]})
    ).errors


def test_h100_node_shares_by_its_model_through_the_kubelet(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    config = sharing(
        timeSlicing={"replicas": 8, "models": [{"models": ["H100"], "replicas": 3}], "renameByDefault": True}
    )
    run_plugin(gpu_node_root("nvidia-h100x8"), config)
    wait_allocatable(kubelet_emulator, {"nvidia.com/gpu.shared": 24})


def test_one_gpu_going_unhealthy_takes_all_its_replicas_and_only_them(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("nvidia-h100x8")
    run_plugin(info, sharing(timeSlicing={"replicas": 3}), health_interval=0.25)
    wait_allocatable(kubelet_emulator, {"nvidia.com/gpu": 24})
    victim = base(sorted(kubelet_emulator.resources()["nvidia.com/gpu"])[0])
    inject_xid(info.root, victim, 79)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == {"nvidia.com/gpu": 21}, timeout=5)
    health = kubelet_emulator.resources()["nvidia.com/gpu"]
    assert {d for d, h in health.items() if h != "Healthy"} == {f"{victim}::{n}" for n in range(3)}


def test_a_sharing_change_is_advertised_without_a_restart(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    handle = run_plugin(gpu_node_root("amd-mi210x8"))
    wait_allocatable(kubelet_emulator, {"amd.com/gpu": 8})
    kubelet_emulator.wait_for(lambda: handle.service.registered, timeout=5)  # the plugin's side done too
    server = handle.service.servers["amd.com/gpu"]
    registrations = server.registrations
    handle.service.apply_config(sharing(timeSlicing={"replicas": 4}))
    wait_allocatable(kubelet_emulator, {"amd.com/gpu": 32})
    handle.service.apply_config(sharing(timeSlicing={"replicas": 2}))
    wait_allocatable(kubelet_emulator, {"amd.com/gpu": 16})
    # Same endpoint, same registration: ListAndWatch carried the new lists.
    assert handle.service.servers["amd.com/gpu"] is server and server.registrations == registrations
    # A rename is a new endpoint; the old resource drops to 0 (the kubelet keeps it for its grace time).
    handle.service.apply_config(sharing(timeSlicing={"replicas": 2, "renameByDefault": True}))
    wait_allocatable(kubelet_emulator, {"amd.com/gpu.shared": 16, "amd.com/gpu": 0})
    handle.service.apply_config(DevicePluginConfig())
    wait_allocatable(kubelet_emulator, {"amd.com/gpu.shared": 0, "amd.com/gpu": 8})


def test_more_than_one_replica_per_container_is_refused_when_asked(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    run_plugin(
        gpu_node_root("amd-mi210x8"), sharing(timeSlicing={"replicas": 2, "failRequestsGreaterThanOne": True})
    )
    wait_allocatable(kubelet_emulator, {"amd.com/gpu": 16})
    ids = sorted(kubelet_emulator.resources()["amd.com/gpu"])
    stub = dp.DevicePluginStub(dial_unix(kubelet_emulator.socket_dir / "amd.com_gpu", timeout=5))
    request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids[:2])])
    with pytest.raises(grpc.RpcError) as err:
        stub.Allocate(request, timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "maximum request size for shared resources is 1" in (err.value.details() or "")


def mps_manager(info: NodeRootInfo) -> MpsDaemonManager:
    prefix = [sys.executable, "-m", "gpuop_sim.hostfakes", "--root", str(info.root)]
    return MpsDaemonManager(info.root, open_backends(info.root, "nvidia"), MpsControl(prefix))


def test_mps_replicas_wait_for_the_control_daemon_and_carry_its_pipe_and_limits(
    node: Callable[[str], NodeRootInfo], run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = node("nvidia-h100x8")
    config = sharing(mps={"replicas": 4, "activeThreadPercentage": 20})
    handle = run_plugin(info, config)
    kubelet_emulator.wait_for(lambda: handle.service.state is not None, timeout=10)
    assert "waiting for the MPS control daemon" in " ".join(handle.service.state.plan.errors)
    assert kubelet_emulator.allocatable().get("nvidia.com/gpu", 0) == 0

    daemon = mps_manager(info)
    daemon.apply(config)  # what the mps-control-daemon DaemonSet's pod does first
    host = mps_state(info.root)
    assert host["running"] and (info.root / "run/gpuop/mps/pipe/control").exists()
    assert "set_default_active_thread_percentage 20" in host["defaults"]
    wait_allocatable(kubelet_emulator, {"nvidia.com/gpu": 32})

    one = sorted(kubelet_emulator.resources()["nvidia.com/gpu"])[0]
    response = kubelet_emulator.allocate("nvidia.com/gpu", [one]).response
    assert response.envs["CUDA_MPS_PIPE_DIRECTORY"] == "/run/gpuop/mps/pipe"
    assert response.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "20"
    limit = response.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]
    assert limit.startswith(f"{base(one)}=") and limit.endswith("M")
    assert f"set_default_device_pinned_mem_limit {base(one)} {limit.split('=')[1]}" in host["defaults"]
    # The pipes, and the daemon's shared memory as the container's /dev/shm (writable: clients
    # attach through segments there; the container's own /dev/shm is private to it).
    assert [(m.host_path, m.container_path, m.read_only) for m in response.mounts] == [
        ("/run/gpuop/mps/pipe", "/run/gpuop/mps/pipe", False),
        ("/run/gpuop/mps/shm", "/dev/shm", False),
    ]
    assert host["dev_shm"] == "/run/gpuop/mps/shm"  # the same directory is the daemon's /dev/shm
    assert mounts(info.root)["/run/gpuop/mps/shm"]["type"] == "tmpfs"

    daemon.stop()  # MPS turned off or the daemon pod gone: no replica without a daemon behind it
    assert not mps_state(info.root)["running"]
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("nvidia.com/gpu", 0) == 0, 10)


def test_mps_leaves_mig_enabled_and_amd_gpus_alone_and_says_why(node: Callable[[str], NodeRootInfo]) -> None:
    config = sharing(mps={"replicas": 2})
    mig = build_plan(gpus_of(node("nvidia-h100x8-mig")), config)
    assert any("has MIG enabled; MPS needs whole GPUs" in e for e in mig.errors)
    amd = build_plan(gpus_of(node("amd-mi210x8")), config)
    assert amd.resources == {"amd.com/gpu": amd.resources["amd.com/gpu"]}
    assert len(amd.resources["amd.com/gpu"]) == 8
    assert any("MPS is NVIDIA-only" in e for e in amd.errors)


def test_the_daemon_state_file_is_what_the_plugin_checks(node: Callable[[str], NodeRootInfo]) -> None:
    info = node("nvidia-h100x8")
    daemon = mps_manager(info)
    daemon.apply(sharing(mps={"replicas": 4}))
    ready = json.loads((info.root / "run/gpuop/mps/ready.json").read_text())
    assert ready["replicas"] == 4 and len(ready["gpus"]) == 8
    daemon.apply(sharing(mps={"replicas": 8}))  # a new count re-sends the defaults, no restart
    assert json.loads((info.root / "run/gpuop/mps/ready.json").read_text())["replicas"] == 8
    assert mps_state(info.root)["running"]
    daemon.apply(DevicePluginConfig())
    assert not (info.root / "run/gpuop/mps/ready.json").exists()


def test_the_daemon_gets_its_own_dev_shm_and_only_it() -> None:
    mps = sharing(mps={"replicas": 4, "root": "/var/run/mps/"}).sharing.mps
    assert mps is not None
    assert daemon_start_argv(mps) == [
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", 'mount --bind "$1" /dev/shm && exec nvidia-cuda-mps-control -d',
        "mps-control", "/var/run/mps/shm",
    ]  # fmt: skip
    assert shm_mount_argv(mps, mounted=False) == [
        "mount", "-t", "tmpfs", "-o", "nosuid,nodev,mode=1777,size=50%", "tmpfs", "/var/run/mps/shm",
    ]  # fmt: skip
    sized = sharing(mps={"replicas": 4, "shmSizeMiB": 512}).sharing.mps
    assert sized is not None
    assert shm_mount_argv(sized, mounted=True) == [
        "mount", "-o", "remount,nosuid,nodev,mode=1777,size=512m", "/run/gpuop/mps/shm",
    ]  # fmt: skip


def test_the_shm_tmpfs_is_mounted_once_and_resized_in_place(node: Callable[[str], NodeRootInfo]) -> None:
    info = node("nvidia-h100x8")
    daemon = mps_manager(info)
    daemon.apply(sharing(mps={"replicas": 4}))
    assert mounts(info.root)["/run/gpuop/mps/shm"]["options"].endswith("size=50%")
    daemon.apply(sharing(mps={"replicas": 4, "shmSizeMiB": 256}))
    assert mounts(info.root)["/run/gpuop/mps/shm"]["options"].endswith("size=256m")
    daemon.stop()
    # A restarted daemon pod finds the tmpfs still on the host: re-sized, not stacked.
    restarted = mps_manager(info)
    restarted.apply(sharing(mps={"replicas": 4, "shmSizeMiB": 128}))
    assert mounts(info.root)["/run/gpuop/mps/shm"] == {
        "type": "tmpfs",
        "options": "nosuid,nodev,mode=1777,size=128m",
    }
    assert [c[:2] for c in recorded(info.root) if c[0] == "mount"].count(["mount", "-t"]) == 1
    restarted.stop()


def test_the_daemon_does_not_start_without_its_shm_directory(node: Callable[[str], NodeRootInfo]) -> None:
    info = node("nvidia-h100x8")
    mps = sharing(mps={"replicas": 4}).sharing.mps
    assert mps is not None
    control = mps_manager(info).control
    # As `mount --bind` on a host without the directory: the bind, and so the daemon, fails.
    with pytest.raises(MpsCommandError, match="special device /run/gpuop/mps/shm does not exist"):
        control.run(mps, daemon_start_argv(mps))
    assert not mps_state(info.root)["running"]
