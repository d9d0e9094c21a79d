"""The resource manager's pure rules: naming, merge, preference, health verdicts, request checks."""

from __future__ import annotations

import dataclasses

import pytest
from gpuop_common.config import DevicePluginConfig
from gpuop_common.config.device_plugin import HealthChecks
from gpuop_common.gpu import GpuDevice, GpuHealth, HealthReason, PartitionState, PciIds, Vendor
from gpuop_common.gpu.changes import merge_inventory
from gpuop_device_plugin.allocation import AllocationRequestError, grant, validate_request
from gpuop_device_plugin.devices import PluginDevice
from gpuop_device_plugin.health import evaluate
from gpuop_device_plugin.inventory import build_plan
from gpuop_device_plugin.topology import preferred_devices


def amd_gpu(
    index: int, *, mode: tuple[str, str] | None = None, hive: str | None = None, numa: int = 0
) -> GpuDevice:
    state = PartitionState(mode[0], mode[1], ("SPX", "CPX"), ("NPS1", "NPS4")) if mode else None
    return GpuDevice(
        vendor=Vendor.AMD,
        id=f"uid{index}",
        index=index,
        pci_address=f"0000:{index + 3:02x}:00.0",
        pci=PciIds(0x1002, 0x740F),
        model="AMD Instinct MI210",
        numa_node=numa,
        device_nodes=("/dev/kfd", f"/dev/dri/card{index}", f"/dev/dri/renderD{128 + index}"),
        hive_id=hive,
        partition=state,
    )


def dev(dev_id: str, physical: str, *, hive: str | None = None, numa: int | None = 0) -> PluginDevice:
    return PluginDevice(
        dev_id, "amd.com/gpu", Vendor.AMD, physical, dev_id, f"GPU-{physical}", (), numa, hive
    )


def test_single_naming_refuses_mixed_partition_modes_and_mixed_accepts_them() -> None:
    gpus = [amd_gpu(0, mode=("SPX", "NPS1")), amd_gpu(1, mode=("CPX", "NPS4"))]
    single = build_plan(gpus, DevicePluginConfig())
    assert single.resources == {} and "use mixed" in single.errors[0]
    mixed = build_plan(gpus, DevicePluginConfig(resource_naming_strategy="mixed"))
    assert sorted(mixed.resources) == ["amd.com/cpx_nps4", "amd.com/spx_nps1"]


def test_resource_filter_by_model_and_pci_address() -> None:
    gpus = [amd_gpu(0), amd_gpu(1), dataclasses.replace(amd_gpu(2), model="AMD Radeon Pro W7900")]
    plan = build_plan(gpus, DevicePluginConfig.model_validate({"resourceFilter": {"models": ["mi210"]}}))
    assert [d.id for d in plan.resources["amd.com/gpu"]] == ["0000:03:00.0", "0000:04:00.0"]
    plan = build_plan(
        gpus, DevicePluginConfig.model_validate({"resourceFilter": {"pciAddresses": ["0000:05:00.0"]}})
    )
    assert [d.id for d in plan.resources["amd.com/gpu"]] == ["0000:05:00.0"]


def test_merge_keeps_vanished_gpus_but_takes_repartitioned_ones_as_they_are() -> None:
    before = [amd_gpu(0, mode=("SPX", "NPS1")), amd_gpu(1, mode=("SPX", "NPS1"))]
    assert [g.id for g in merge_inventory(before, before[:1])] == ["uid0", "uid1"]
    repartitioned = [amd_gpu(0, mode=("CPX", "NPS4")), before[1]]
    merged = merge_inventory(before, repartitioned)
    assert merged[0].partition is not None and merged[0].partition.compute == "CPX"


def test_preference_prefers_hive_then_numa_and_is_deterministic() -> None:
    devices = [
        dev("a", "A", hive="h1", numa=0),
        dev("b", "B", hive="h2", numa=0),
        dev("c", "C", hive="h1", numa=1),
    ]
    assert sorted(preferred_devices(devices, [], 2)) == ["a", "c"]
    no_fabric = [dev("a", "A", numa=0), dev("b", "B", numa=1), dev("c", "C", numa=0)]
    assert sorted(preferred_devices(no_fabric, [], 2)) == ["a", "c"]
    assert preferred_devices(no_fabric, [no_fabric[1]], 2)[0] == "b"
    assert preferred_devices(list(reversed(no_fabric)), [], 2) == preferred_devices(no_fabric, [], 2)


def test_preference_packs_partitions_and_spares_whole_gpus() -> None:
    # GPU P has 2 free partitions left, GPU Q all 4: a 2-device request should finish P first.
    devices = [dev(f"p{i}", "P") for i in range(2)] + [dev(f"q{i}", "Q") for i in range(4)]
    assert sorted(preferred_devices(devices, [], 2)) == ["p0", "p1"]


def test_health_verdict_is_per_device_with_sticky_option() -> None:
    devices = [dev("a", "A"), dev("b", "B")]
    bad = GpuHealth("B", (HealthReason("kfd_node_vanished", "gone"),))
    verdict = evaluate(devices, [GpuHealth("A"), bad], HealthChecks())
    assert verdict.states == {"a": "Healthy", "b": "Unhealthy"}
    sticky = HealthChecks(recover_automatically=False)
    assert (
        evaluate(devices, [GpuHealth("A"), GpuHealth("B")], sticky, sticky={"b"}).states["b"] == "Unhealthy"
    )
    assert evaluate(devices, [GpuHealth("A")], HealthChecks()).states["b"] == "Unhealthy"  # unreported GPU


def test_ras_threshold_tolerates_small_rises() -> None:
    devices = [dev("a", "A")]
    ras = GpuHealth("A", (HealthReason("ras_uncorrectable_increase", "rose"),))
    lenient = HealthChecks(ras_uncorrectable_threshold=3)
    assert (
        evaluate(devices, [ras], lenient, ras_baseline={"A": 1}, ras_current={"A": 4}).states["a"]
        == "Healthy"
    )
    assert (
        evaluate(devices, [ras], lenient, ras_baseline={"A": 1}, ras_current={"A": 5}).states["a"]
        == "Unhealthy"
    )


def test_requests_are_checked_as_a_whole() -> None:
    devices = {"a": dev("a", "A"), "b": dev("b", "B")}
    health = {"a": "Healthy", "b": "Unhealthy"}
    with pytest.raises(AllocationRequestError, match="unknown device ids: x, y"):
        validate_request("amd.com/gpu", ["a", "y", "x"], devices, health)
    with pytest.raises(AllocationRequestError, match="unhealthy: b") as err:
        validate_request("amd.com/gpu", ["a", "b"], devices, health)
    assert err.value.code == "FAILED_PRECONDITION"
    result = grant("amd.com/gpu", validate_request("amd.com/gpu", ["a"], devices, health), cdi=False)
    assert result.envs == {"ROCR_VISIBLE_DEVICES": "GPU-A", "HIP_VISIBLE_DEVICES": "GPU-A"}
