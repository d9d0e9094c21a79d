"""The plugin against the kubelet emulator over real unix sockets, on every simulated node profile."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from gpuop_common.config import DevicePluginConfig
from gpuop_common.gpu import AmdSysfsBackend, open_backends
from gpuop_common.gpu.cdi import validate_spec
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import dial_unix
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo, amd_driver
from gpuop_sim.nodes.nvml_state import STATE_RELPATH, load_state

MakeRoot = Callable[..., NodeRootInfo]
StartPlugin = Callable[..., Any]  # conftest.run_plugin -> PluginHandle

EXPECTED = {
    "amd-mi210x8": {"amd.com/gpu": 8},
    "amd-mi300x-cpx": {"amd.com/gpu": 63},
    "amd-mi300x-spx": {"amd.com/gpu": 8},
    "amd-single": {"amd.com/gpu": 1},
    "amd-radeon": {"amd.com/gpu": 1},
    "nvidia-h100x8": {"nvidia.com/gpu": 8},
    "nvidia-h100x8-mig": {"nvidia.com/gpu": 8},
}


def plugin_socket(kubelet: KubeletEmulator, name: str) -> Path:
    return Path(kubelet.socket_dir) / name


def amd_drm_names(root: Path, bdf: str) -> set[str]:
    """The card*/renderD* names sysfs lists for this PCI device (independent of the backend)."""
    device = (root / "sys/bus/pci/devices" / bdf).resolve()
    return {
        entry.name
        for entry in (root / "sys/class/drm").iterdir()
        if "-" not in entry.name and (entry / "device").resolve() == device
    }


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_registers_lists_and_allocates_on_every_profile(
    profile: str, gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root(profile)
    run_plugin(info)
    expected = EXPECTED[profile]
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == expected, timeout=15)
    assert kubelet_emulator.capacity() == expected
    (resource,) = expected
    options = kubelet_emulator.plugin_options(resource)
    assert options is not None and options.get_preferred_allocation_available
    devices = kubelet_emulator.resources()[resource]
    assert set(devices.values()) == {"Healthy"}

    one = sorted(devices)[0]
    grant = kubelet_emulator.allocate(resource, [one])
    response = grant.response
    paths = [d.host_path for d in response.devices]
    assert all(d.container_path == d.host_path and d.permissions == "rw" for d in response.devices)
    assert all((info.root / p.lstrip("/")).exists() for p in paths), paths
    if resource.startswith("amd.com"):
        assert paths[0] == "/dev/kfd" and paths.count("/dev/kfd") == 1
        assert any(p.startswith("/dev/dri/renderD") for p in paths)
        assert any(p.startswith("/dev/dri/card") for p in paths)
        if not one.startswith("amdgpu_xcp_"):
            assert {Path(p).name for p in paths[1:]} == amd_drm_names(info.root, one)
        assert response.envs["ROCR_VISIBLE_DEVICES"].startswith("GPU-")
        assert response.envs["HIP_VISIBLE_DEVICES"] == response.envs["ROCR_VISIBLE_DEVICES"]
    else:
        state = load_state(info.root / STATE_RELPATH)
        minor = next(g.minor_number for g in state.gpus if g.uuid == one)
        assert {f"/dev/nvidia{minor}", "/dev/nvidiactl", "/dev/nvidia-uvm"} <= set(paths)
        assert response.envs == {"NVIDIA_VISIBLE_DEVICES": one}


def test_cpu_only_node_advertises_nothing(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    handle = run_plugin(gpu_node_root("cpu-only"))
    handle.service.tick()
    assert kubelet_emulator.resources() == {}
    assert [p.name for p in Path(kubelet_emulator.socket_dir).iterdir() if p.name != "kubelet.sock"] == [
        p.name for p in Path(kubelet_emulator.socket_dir).iterdir() if p.name == "kubelet_internal_checkpoint"
    ]


def test_socket_names_follow_the_vendor_plugins(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    run_plugin(gpu_node_root("amd-mi210x8"))
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("amd.com/gpu") == 8, timeout=10)
    assert plugin_socket(kubelet_emulator, "amd.com_gpu").is_socket()


def test_nvidia_mig_mixed_strategy_resources(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    run_plugin(gpu_node_root("nvidia-h100x8-mig"), DevicePluginConfig(mig_strategy="mixed"))
    expected = {"nvidia.com/gpu": 5, "nvidia.com/mig-1g.10gb": 8, "nvidia.com/mig-3g.40gb": 3}
    expected["nvidia.com/mig-2g.20gb"] = 1
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == expected, timeout=15)
    assert plugin_socket(kubelet_emulator, "nvidia-mig-1g.10gb.sock").is_socket()
    mig = sorted(kubelet_emulator.resources()["nvidia.com/mig-1g.10gb"])[0]
    grant = kubelet_emulator.allocate("nvidia.com/mig-1g.10gb", [mig])
    response = grant.response
    assert response.envs == {"NVIDIA_VISIBLE_DEVICES": mig}
    assert any("nvidia-caps" in d.host_path for d in response.devices)


def test_nvidia_mig_single_strategy_refuses_a_mixed_node(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    handle = run_plugin(gpu_node_root("nvidia-h100x8-mig"), DevicePluginConfig(mig_strategy="single"))
    state = handle.service.tick()
    assert state.plan.resources == {}
    assert any("MIG disabled" in error for error in state.plan.errors)
    assert kubelet_emulator.resources() == {}


def test_mixed_naming_on_the_mi300x_cpx_capture(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi300x-cpx")
    run_plugin(info, DevicePluginConfig(resource_naming_strategy="mixed"))
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == {"amd.com/cpx_nps4": 63}, timeout=15)
    assert plugin_socket(kubelet_emulator, "amd.com_cpx_nps4").is_socket()
    ids = set(kubelet_emulator.resources()["amd.com/cpx_nps4"])
    assert set(info.pci_addresses) <= ids  # partition 0 of each GPU is named by its PCI address
    assert {i for i in ids if i.startswith("amdgpu_xcp_")} == {f"amdgpu_xcp_{n}" for n in range(63 - 8)}
    # Partitions of one physical GPU are packed together.
    grant = kubelet_emulator.allocate("amd.com/cpx_nps4", 4)
    backend = open_backends(info.root)[0]
    parent = {p.id: g.id for g in backend.enumerate() for p in g.partitions}
    assert len({parent[i] for i in grant.device_ids}) == 1
    renders = [d.host_path for d in grant.response.devices if "renderD" in d.host_path]
    assert len(set(renders)) == 4


def test_mixed_naming_on_a_spx_node(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    run_plugin(gpu_node_root("amd-mi300x-spx"), DevicePluginConfig(resource_naming_strategy="mixed"))
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == {"amd.com/spx_nps1": 8}, timeout=15)


def test_preferred_allocation_keeps_a_pair_inside_one_xgmi_hive(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi210x8")
    run_plugin(info)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("amd.com/gpu") == 8, timeout=10)
    hive = {g.pci_address: g.hive_id for g in open_backends(info.root)[0].enumerate()}
    hives = sorted(set(hive.values()))
    assert len(hives) == 2
    a = sorted(b for b, h in hive.items() if h == hives[0])
    b = sorted(b for b, h in hive.items() if h == hives[1])
    # One GPU of hive A first in the list, then hive B, then another of hive A: the in-hive pair wins.
    offered = [a[0], b[0], a[1]]
    chosen = kubelet_emulator.get_preferred_allocation("amd.com/gpu", offered, [], 2)
    assert sorted(chosen) == sorted([a[0], a[1]])
    # must_include is honoured and completed from its own hive.
    chosen = kubelet_emulator.get_preferred_allocation("amd.com/gpu", [*a, *b], [b[2]], 3)
    assert b[2] in chosen and {hive[c] for c in chosen} == {hives[1]}
    # Deterministic: the same question gets the same answer.
    answers = {
        tuple(kubelet_emulator.get_preferred_allocation("amd.com/gpu", [*b, *a], [], 4)) for _ in range(3)
    }
    assert len(answers) == 1 and {hive[c] for c in next(iter(answers))} in ({hives[0]}, {hives[1]})
    # Through the kubelet's own selection, 4 GPUs come from one hive.
    grant = kubelet_emulator.allocate("amd.com/gpu", 4)
    assert len({hive[d] for d in grant.device_ids}) == 1


def test_preferred_allocation_on_nvidia_prefers_one_numa_node_without_fabric(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    run_plugin(gpu_node_root("nvidia-h100x8"))
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("nvidia.com/gpu") == 8, timeout=10)
    devices = sorted(kubelet_emulator.resources()["nvidia.com/gpu"])
    chosen = kubelet_emulator.get_preferred_allocation("nvidia.com/gpu", devices, [devices[3]], 2)
    assert devices[3] in chosen and len(chosen) == 2


def call_plugin(kubelet: KubeletEmulator, socket: str) -> dp.DevicePluginStub:
    channel = dial_unix(plugin_socket(kubelet, socket), timeout=5)
    return dp.DevicePluginStub(channel)


def allocate_ids(stub: dp.DevicePluginStub, ids: list[str]) -> dp.AllocateResponse:
    request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=ids)])
    return stub.Allocate(request, timeout=5)


def test_bad_requests_get_a_grpc_error_naming_the_ids(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi210x8")
    run_plugin(info)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("amd.com/gpu") == 8, timeout=10)
    good = sorted(kubelet_emulator.resources()["amd.com/gpu"])[0]
    stub = call_plugin(kubelet_emulator, "amd.com_gpu")
    with pytest.raises(grpc.RpcError) as err:
        allocate_ids(stub, [good, "0000:ff:00.0", "bogus"])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "0000:ff:00.0" in err.value.details() and "bogus" in err.value.details()
    with pytest.raises(grpc.RpcError) as err:
        stub.Allocate(dp.AllocateRequest(), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as err:
        allocate_ids(stub, [])
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as err:
        stub.GetPreferredAllocation(
            dp.PreferredAllocationRequest(
                container_requests=[
                    dp.ContainerPreferredAllocationRequest(
                        available_deviceIDs=[good, "nope"], allocation_size=1
                    )
                ]
            ),
            timeout=5,
        )
    assert "nope" in err.value.details()
    # An unhealthy device is refused as a whole request, naming it.
    from gpuop_sim.nodes import vanish_gpu

    assert (
        allocate_ids(stub, [good]).container_responses[0].devices
    )  # answered (and remembered) while healthy
    vanish_gpu(info.root, good)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.resources()["amd.com/gpu"][good] == "Unhealthy", 5)
    with pytest.raises(grpc.RpcError) as err:
        allocate_ids(stub, [good])  # the remembered answer is not reused once the device is unhealthy
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    other = sorted(kubelet_emulator.resources()["amd.com/gpu"])[1]
    with pytest.raises(grpc.RpcError) as err:
        allocate_ids(stub, [other, good])
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert good in err.value.details() and other not in err.value.details()
    # The plugin still serves good requests afterwards.
    assert allocate_ids(stub, [other]).container_responses[0].devices
    assert stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=[other]), timeout=5) is not None


def test_kubelet_restart_re_registers_without_exiting(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    handle = run_plugin(gpu_node_root("amd-mi300x-cpx"), DevicePluginConfig(resource_naming_strategy="mixed"))
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == {"amd.com/cpx_nps4": 63}, timeout=15)
    # The kubelet can list devices before the plugin's Register call has returned (and counted):
    # read the count only once the plugin's side is done, or a slow machine reads one short.
    kubelet_emulator.wait_for(lambda: handle.service.registered, timeout=5)
    server = handle.service.servers["amd.com/cpx_nps4"]
    before = server.registrations
    for restarts in (1, 2):
        kubelet_emulator.restart()
        # The plugin notices the new kubelet socket on its own schedule: wait for its Register
        # (allocatable and `registered` may still show the last registration for a moment).
        kubelet_emulator.wait_for(lambda n=restarts: server.registrations >= before + n, timeout=15)
        kubelet_emulator.wait_for(
            lambda: kubelet_emulator.allocatable() == {"amd.com/cpx_nps4": 63}, timeout=10
        )
        kubelet_emulator.wait_for(lambda: handle.service.registered, timeout=5)
    assert server.registrations == before + 2  # once per restart, never more
    grant = kubelet_emulator.allocate("amd.com/cpx_nps4", 2)
    assert len(grant.device_ids) == 2


def test_time_slicing_replicas(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    sharing = {
        "timeSlicing": {
            "renameByDefault": True,
            "failRequestsGreaterThanOne": True,
            "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
        }
    }
    run_plugin(gpu_node_root("nvidia-h100x8"), DevicePluginConfig.model_validate({"sharing": sharing}))
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == {"nvidia.com/gpu.shared": 32}, 10)
    ids = sorted(kubelet_emulator.resources()["nvidia.com/gpu.shared"])
    assert all("::" in i for i in ids) and {i.rsplit("::", 1)[1] for i in ids} == {"0", "1", "2", "3"}
    grant = kubelet_emulator.allocate("nvidia.com/gpu.shared", [ids[0]])
    assert grant.response.envs["NVIDIA_VISIBLE_DEVICES"] == ids[0].split("::")[0]
    stub = call_plugin(kubelet_emulator, "nvidia-gpu.shared.sock")
    with pytest.raises(grpc.RpcError) as err:
        allocate_ids(stub, ids[4:6])
    assert "maximum request size for shared resources is 1" in err.value.details()
    # Preferred replicas are spread over distinct GPUs.
    chosen = kubelet_emulator.get_preferred_allocation("nvidia.com/gpu.shared", ids, [], 3)
    assert len({c.split("::")[0] for c in chosen}) == 3


def test_cdi_mode_names_devices_and_writes_the_spec(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi210x8")
    handle = run_plugin(info, DevicePluginConfig(cdi=True))
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("amd.com/gpu") == 8, timeout=10)
    one = sorted(kubelet_emulator.resources()["amd.com/gpu"])[0]
    response = kubelet_emulator.allocate("amd.com/gpu", [one]).response
    assert [c.name for c in response.cdi_devices] == [f"amd.com/gpu={one}"]
    assert response.annotations == {"cdi.k8s.io/gpuop-device-plugin_amd.com_gpu": f"amd.com/gpu={one}"}
    assert not response.devices
    spec = json.loads((info.root / "var/run/cdi/gpuop-amd.com-gpu.json").read_text())
    # PCI-address names start with a digit: 0.5.0, which podman 4.3 and containerd 1.7 load
    assert spec["kind"] == "amd.com/gpu" and spec["cdiVersion"] == "0.5.0"
    validate_spec(spec)  # what a CDI runtime would load
    entry = next(d for d in spec["devices"] if d["name"] == one)
    nodes = {n["path"] for n in entry["containerEdits"]["deviceNodes"]}
    assert "/dev/kfd" in nodes
    assert {Path(n).name for n in nodes - {"/dev/kfd"}} == amd_drm_names(info.root, one)
    # Turning CDI off removes our spec (stale names must not resolve) and hands out device nodes again.
    handle.service.apply_config(DevicePluginConfig(cdi=False))
    spec_file = info.root / "var/run/cdi/gpuop-amd.com-gpu.json"
    kubelet_emulator.wait_for(lambda: not spec_file.exists(), timeout=5)
    kubelet_emulator.wait_for(
        lambda: bool(kubelet_emulator.allocate("amd.com/gpu", [one]).response.devices), 5
    )


def test_resource_filter_and_hot_reload(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi300x-cpx")
    handle = run_plugin(info, DevicePluginConfig.model_validate({"resourceFilter": {"indices": [0, 1]}}))
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == {"amd.com/gpu": 16}, timeout=10)
    handle.service.apply_config(DevicePluginConfig(resource_naming_strategy="mixed"))
    kubelet_emulator.wait_for(
        lambda: kubelet_emulator.allocatable().get("amd.com/cpx_nps4") == 63, timeout=10
    )
    kubelet_emulator.wait_for(lambda: not plugin_socket(kubelet_emulator, "amd.com_gpu").exists(), timeout=10)
    assert set(handle.service.servers) == {"amd.com/cpx_nps4"}


def test_partition_mode_change_is_picked_up_by_the_periodic_rescan(
    gpu_node_root: MakeRoot, run_plugin: StartPlugin, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi300x-cpx")
    config = DevicePluginConfig.model_validate(
        {"resourceNamingStrategy": "mixed", "health": {"pollIntervalSeconds": 1}}
    )
    run_plugin(info, config)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == {"amd.com/cpx_nps4": 63}, timeout=15)
    # What the config manager does for a compute-only change (one that needs no driver reload):
    # through the simulated amdgpu driver, which re-lays the KFD nodes. GPU 0 becomes 4 QPX
    # devices; the rebuilt topology also gives the capture's last GPU its eighth partition (8 XCCs):
    # 7 x 8 CPX devices.
    backend = AmdSysfsBackend(info.root, writer=amd_driver.write_attr)
    backend.set_partition_mode(info.pci_addresses[0], "qpx_nps4")
    expected = {"amd.com/cpx_nps4": 56, "amd.com/qpx_nps4": 4}
    # The rescan reads the 72 rebuilt KFD nodes; give a loaded 2-core machine time for it.
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == expected, timeout=60)
    assert plugin_socket(kubelet_emulator, "amd.com_qpx_nps4").is_socket()
