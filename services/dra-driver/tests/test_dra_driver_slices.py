"""ResourceSlices in the simulated API server (which validates resource.k8s.io/v1 as 1.36 does)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuop_common.config import Sharing
from gpuop_common.gpu import AmdSysfsBackend, Vendor, open_backends
from gpuop_common.kubejson import RESOURCESLICES, KubeJson
from gpuop_dra_driver import DRIVER_NAME
from gpuop_dra_driver.devices import DraDevice, build_devices
from gpuop_dra_driver.publisher import SlicePublisher
from gpuop_dra_driver.slices import MAX_DEVICES_PER_SLICE
from gpuop_sim.nodes import NodeRootInfo, amd_driver
from gpuop_sim.nodes.faults import vanish_gpu
from gpuop_sim.waiting import wait_until

NODE = "gpu-node-1"  # conftest's node
MakeRoot = Callable[..., NodeRootInfo]
StartDriver = Callable[..., Any]  # conftest.run_driver -> DriverHandle


def own(kube: KubeJson, node: str = NODE, driver: str = DRIVER_NAME) -> list[dict[str, Any]]:
    items, _ = kube.list(RESOURCESLICES, fieldSelector=f"spec.nodeName={node},spec.driver={driver}")
    return sorted(items, key=lambda s: s["metadata"]["name"])


def devices_of(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices for d in s["spec"]["devices"]}


def attr(device: dict[str, Any], name: str) -> Any:
    (value,) = device["attributes"][name].values()
    return value


def test_the_cpx_capture_is_published_device_for_device(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kube: KubeJson
) -> None:
    info = gpu_node_root("amd-mi300x-cpx")
    run_driver(info)
    wait_until(lambda: bool(own(kube)), timeout=60)
    (slice_,) = own(kube)
    spec = slice_["spec"]
    assert spec["pool"] == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    assert spec["nodeName"] == NODE and spec["driver"] == DRIVER_NAME
    assert slice_["metadata"]["ownerReferences"][0]["kind"] == "Node"
    devices = devices_of([slice_])
    assert len(devices) == info.partition_count == 63
    # Every partition names its parent by PCI address and unique id; each GPU's partitions share both.
    parents = {attr(d, "pciAddress") for d in devices.values()}
    assert parents == set(info.pci_addresses)
    for device in devices.values():
        assert attr(device, "type") == "partition" and attr(device, "vendor") == "amd"
        assert attr(device, "partitionProfile") == "cpx_nps4"
        assert attr(device, "architecture") == "gfx942" and attr(device, "family") == "AI"
        assert attr(device, "deviceId") == "0x74a1" and attr(device, "driverVersion") == "6.10.5"
        assert device["name"].startswith(
            "gpu-" + attr(device, "pciAddress").replace(":", "-").replace(".", "-")
        )
        assert set(device["capacity"]) == {"memory", "computeUnits"}
        assert device["capacity"]["computeUnits"] == {"value": "38"}
    hives = {attr(d, "xgmiHive") for d in devices.values()}
    assert len(hives) == 1  # one XGMI hive of 8 GPUs


def test_nvidia_mig_devices_are_published(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kube: KubeJson
) -> None:
    info = gpu_node_root("nvidia-h100x8-mig")
    handle = run_driver(info)
    wait_until(lambda: bool(own(kube)), timeout=60)
    devices = devices_of(own(kube))
    assert set(devices) == set(handle.service.inventory.devices())
    migs = [d for d in devices.values() if attr(d, "type") == "partition"]
    assert len(migs) == info.partition_count
    assert {attr(d, "vendor") for d in devices.values()} == {"nvidia"}
    for mig in migs:
        assert attr(mig, "uuid").startswith("MIG-") and attr(mig, "parentGpu").startswith("GPU-")
        assert attr(mig, "driverVersion") == "550.54.15"


def test_a_partition_change_re_publishes_with_a_new_generation(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kube: KubeJson
) -> None:
    info = gpu_node_root("amd-mi300x-cpx")
    run_driver(info, rescan_interval=0.5)
    wait_until(lambda: bool(own(kube)), timeout=60)
    # What the config manager does for a compute-only change (no driver reload), through the
    # simulated amdgpu driver (see the device plugin's test): GPU 0 becomes 4 QPX partitions; the
    # rebuilt topology gives the capture's last GPU its eighth partition: 7 x 8 CPX + 4 QPX.
    gpu0 = info.pci_addresses[0]
    AmdSysfsBackend(info.root, writer=amd_driver.write_attr).set_partition_mode(gpu0, "qpx_nps4")

    def profiles() -> list[tuple[str, str]]:
        return sorted(
            (attr(d, "pciAddress"), attr(d, "partitionProfile")) for d in devices_of(own(kube)).values()
        )

    # The driver may publish a state in between (the KFD nodes are re-laid one by one); wait for the end.
    wait_until(lambda: len(profiles()) == 60 and profiles().count((gpu0, "qpx_nps4")) == 4, timeout=60)
    assert own(kube)[0]["spec"]["pool"]["generation"] >= 2
    devices = devices_of(own(kube))
    qpx = [d for d in devices.values() if attr(d, "pciAddress") == gpu0]
    assert sorted(d["name"] for d in qpx) == [f"gpu-0000-05-00-0-part-{i}" for i in range(4)]
    assert {attr(d, "type") for d in qpx} == {"partition"}
    assert {d["capacity"]["computeUnits"]["value"] for d in qpx} == {"76"}  # 2 XCDs of 38 CUs each


def test_an_unhealthy_gpu_leaves_the_slice(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kube: KubeJson
) -> None:
    info = gpu_node_root("amd-mi210x8")
    handle = run_driver(info)
    wait_until(lambda: bool(own(kube)), timeout=60)
    assert len(devices_of(own(kube))) == 8
    vanish_gpu(info.root, info.pci_addresses[5])
    handle.service.wake()
    wait_until(lambda: len(devices_of(own(kube))) == 7, timeout=60)
    assert own(kube)[0]["spec"]["pool"]["generation"] >= 2
    devices = devices_of(own(kube))
    assert info.pci_addresses[5] not in {attr(d, "pciAddress") for d in devices.values()}


def fake_devices(count: int) -> list[DraDevice]:
    return [
        DraDevice(
            name=f"dev-{i:03d}",
            vendor=Vendor.AMD,
            type="gpu",
            uid=f"{i:016x}",
            gpu_id=f"{i:016x}",
            visible_id=f"GPU-{i:016x}",
            device_nodes=("/dev/kfd",),
            attributes={"index": {"int": i}},
            capacity={"memory": "65536Mi"},
        )
        for i in range(count)
    ]


def test_publisher_splits_big_pools_touches_only_its_own_slices_and_writes_only_changes(
    kube: KubeJson,
) -> None:
    def foreign(name: str, node: str, driver: str) -> dict[str, Any]:
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 7, "resourceSliceCount": 1},
                "devices": [{"name": "x"}],
            },
        }

    kube.create(RESOURCESLICES, foreign("other-node", "gpu-node-2", DRIVER_NAME))
    kube.create(RESOURCESLICES, foreign("other-driver", NODE, "gpu.amd.com"))
    kube.create(RESOURCESLICES, foreign("stale-of-ours", NODE, DRIVER_NAME))
    publisher = SlicePublisher(kube, NODE, DRIVER_NAME)

    plan = publisher.publish(fake_devices(MAX_DEVICES_PER_SLICE + 72))
    assert plan.generation == 8 and plan.delete == ("stale-of-ours",)
    slices = own(kube)
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 72]
    assert {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices} == {
        (8, 2)
    }
    # The server canonicalizes quantities (65536Mi -> 64Gi): the content hash keeps that from
    # reading as a change.
    assert slices[0]["spec"]["devices"][0]["capacity"]["memory"]["value"] == "64Gi"
    assert publisher.publish(fake_devices(MAX_DEVICES_PER_SLICE + 72)).empty

    smaller = publisher.publish(fake_devices(3))
    assert smaller.generation == 9 and len(smaller.delete) == 1
    assert [len(s["spec"]["devices"]) for s in own(kube)] == [3]
    assert [s["metadata"]["name"] for s in own(kube, "gpu-node-2")] == ["other-node"]
    assert [s["metadata"]["name"] for s in own(kube, NODE, "gpu.amd.com")] == ["other-driver"]

    publisher.withdraw()
    assert own(kube) == []
    assert len(own(kube, "gpu-node-2")) == 1


def test_devices_say_whether_they_are_shared_and_time_sliced_ones_come_as_replicas(
    gpu_node_root: Callable[..., Any],
) -> None:
    info = gpu_node_root("amd-mi210x8")
    gpus = [g for b in open_backends(info.root) for g in b.enumerate()]
    plain = build_devices(gpus)
    assert len(plain) == 8 and all(d.attributes["shared"] == {"bool": False} for d in plain)
    shared = build_devices(gpus, Sharing.model_validate({"timeSlicing": {"replicas": 4}}))
    assert len(shared) == 32 and len({d.name for d in shared}) == 32
    assert all(
        d.attributes["shared"] == {"bool": True} and d.attributes["replicas"] == {"int": 4} for d in shared
    )
    assert len({d.gpu_id for d in shared}) == 8
