"""The DRA devices of a node: one per whole GPU, AMD compute partition or NVIDIA MIG device (pure).

Device names come from gpuop_common.gpu.dranames (the metrics exporter reads them back): stable
across restarts, built from the GPU's PCI address. A partitioned GPU publishes its partitions only: the
whole GPU is not allocatable while partitioned. Which of them are healthy is `health`'s business.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuop_common.config.sharing import Sharing
from gpuop_common.gpu import GpuDevice, Vendor
from gpuop_common.gpu.dranames import gpu_name, mig_name, partition_name
from gpuop_common.gpu.sharing import replicas_for
from gpuop_common.kubelet.assignments import dra_replica_name

TYPE_GPU = "gpu"
TYPE_PARTITION = "partition"
MAX_ATTRIBUTE_STRING = 64  # ResourceSlice limit on string and version attribute values
# semver 2.0.0, what a `version` attribute must be (the API server checks it).
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)

Attribute = dict[str, str | int | bool]  # {"string": ...} / {"int": ...} / {"version": ...}


@dataclass(frozen=True, slots=True)
class DraDevice:
    """One allocatable device: what the slice publishes and what prepare needs."""

    name: str
    vendor: Vendor
    type: str
    uid: str  # GPU unique id / UUID, the partition or MIG id
    gpu_id: str  # the physical GPU it lives on
    visible_id: str  # what the vendor's *_VISIBLE_DEVICES names it by
    device_nodes: tuple[str, ...]
    attributes: Mapping[str, Attribute] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)

    def slice_entry(self) -> dict[str, object]:
        """The `spec.devices[]` item of a ResourceSlice."""
        entry: dict[str, object] = {"name": self.name}
        if self.attributes:
            entry["attributes"] = {k: dict(v) for k, v in sorted(self.attributes.items())}
        if self.capacity:
            entry["capacity"] = {k: {"value": v} for k, v in sorted(self.capacity.items())}
        return entry


def _string(value: str | None) -> Attribute | None:
    if not value:
        return None
    return {"string": value[:MAX_ATTRIBUTE_STRING]}


def _version(value: str | None) -> Attribute | None:
    # NVIDIA 550.54.15 and amdgpu 6.10.5 are semver; anything else is left out rather than sent as
    # a string, so a CEL expression on `driverVersion` always sees one type.
    if value and _SEMVER.fullmatch(value) and len(value) <= MAX_ATTRIBUTE_STRING:
        return {"version": value}
    return None


def _int(value: int | None) -> Attribute | None:
    return {"int": value} if value is not None and value >= 0 else None


def _attributes(**values: Attribute | None) -> dict[str, Attribute]:
    return {name: value for name, value in values.items() if value is not None}


def _capacity(memory: int | None, compute_units: int | None) -> dict[str, str]:
    out: dict[str, str] = {}
    if memory is not None and memory > 0:
        out["memory"] = str(memory)
    if compute_units is not None and compute_units > 0:
        out["computeUnits"] = str(compute_units)
    return out


def _gpu_attributes(gpu: GpuDevice, device_type: str) -> dict[str, Attribute]:
    fabric = (
        {"xgmiHive": _string(gpu.hive_id)}
        if gpu.vendor == Vendor.AMD
        else {"nvlinkClique": _string(gpu.nvlink_clique)}
    )
    return _attributes(
        vendor=_string(str(gpu.vendor)),
        type=_string(device_type),
        pciAddress=_string(gpu.pci_address),
        productName=_string(gpu.product_name or gpu.model),
        family=_string(gpu.family),
        architecture=_string(gpu.architecture),
        deviceId=_string(f"0x{gpu.pci.device_id:04x}"),
        driverVersion=_version(gpu.driver_version),
        numaNode=_int(gpu.numa_node),
        index=_int(gpu.index),
        **fabric,
    )


def amd_devices(gpu: GpuDevice) -> list[DraDevice]:
    base = _gpu_attributes(gpu, TYPE_GPU)
    visible = f"GPU-{gpu.id}"
    profile = gpu.partition.key if gpu.partition else None
    if not gpu.partitions:
        return [
            DraDevice(
                name=gpu_name(gpu),
                vendor=Vendor.AMD,
                type=TYPE_GPU,
                uid=gpu.id,
                gpu_id=gpu.id,
                visible_id=visible,
                device_nodes=gpu.device_nodes,
                attributes={
                    **base,
                    "uuid": {"string": gpu.id},
                    **_attributes(partitionProfile=_string(profile)),
                },
                capacity=_capacity(gpu.vram_total_bytes, gpu.compute_units),
            )
        ]
    devices = []
    for part in gpu.partitions:
        numa = part.numa_node if part.numa_node is not None else gpu.numa_node
        attributes: dict[str, Attribute] = {
            **base,
            "type": {"string": TYPE_PARTITION},
            "uuid": {"string": part.id},
            "parentGpu": {"string": gpu.id},
            "partitionIndex": {"int": part.index},
            **_attributes(partitionProfile=_string(profile), numaNode=_int(numa)),
        }
        devices.append(
            DraDevice(
                name=partition_name(gpu, part.index),
                vendor=Vendor.AMD,
                type=TYPE_PARTITION,
                uid=part.id,
                gpu_id=gpu.id,
                visible_id=visible,
                device_nodes=part.device_nodes,
                attributes=attributes,
                capacity=_capacity(part.memory_bytes, part.compute_units),
            )
        )
    return devices


def _mig_enabled(gpu: GpuDevice) -> bool:
    return gpu.partition is not None and gpu.partition.compute == "mig"


def nvidia_devices(gpu: GpuDevice) -> list[DraDevice]:
    base = _gpu_attributes(gpu, TYPE_GPU)
    if not _mig_enabled(gpu):
        return [
            DraDevice(
                name=gpu_name(gpu),
                vendor=Vendor.NVIDIA,
                type=TYPE_GPU,
                uid=gpu.id,
                gpu_id=gpu.id,
                visible_id=gpu.id,
                device_nodes=gpu.device_nodes,
                attributes={**base, "uuid": {"string": gpu.id}},
                capacity=_capacity(gpu.vram_total_bytes, gpu.compute_units),
            )
        ]
    devices = []
    for mig in gpu.mig_devices:
        attributes: dict[str, Attribute] = {
            **base,
            "type": {"string": TYPE_PARTITION},
            "uuid": {"string": mig.uuid},
            "parentGpu": {"string": gpu.id},
            "partitionIndex": {"int": mig.index},
            **_attributes(partitionProfile=_string(mig.profile)),
        }
        devices.append(
            DraDevice(
                name=mig_name(gpu, mig),
                vendor=Vendor.NVIDIA,
                type=TYPE_PARTITION,
                uid=mig.uuid,
                gpu_id=gpu.id,
                visible_id=mig.uuid,
                device_nodes=mig.device_nodes,
                attributes=attributes,
                capacity=_capacity(mig.memory_bytes, None),
            )
        )
    return devices


def _resource_of(device: DraDevice, gpu: GpuDevice) -> str:
    """The device plugin resource this device would be under (what `timeSlicing.resources` names)."""
    if device.type == TYPE_GPU:
        return f"{gpu.vendor.value}.com/gpu"
    profile = str(device.attributes.get("partitionProfile", {}).get("string", ""))
    if gpu.vendor == Vendor.NVIDIA:
        return f"nvidia.com/mig-{profile.replace('+', '.')}"
    return f"amd.com/{profile}" if profile else "amd.com/gpu"


def time_sliced(device: DraDevice, gpu: GpuDevice, sharing: Sharing) -> list[DraDevice]:
    """The device itself (`shared: false`), or `replicas` devices `<name>-ts-<n>` (`shared: true`)
    that a scheduler may hand to as many claims; a claim several pods reference needs no replicas."""
    decision = replicas_for(_resource_of(device, gpu), gpu, sharing, mig=_mig_enabled(gpu))
    if decision is None:
        return [dataclasses.replace(device, attributes={**device.attributes, "shared": {"bool": False}})]
    return [
        dataclasses.replace(
            device,
            name=dra_replica_name(device.name, n),
            uid=f"{device.uid}::{n}",
            attributes={
                **device.attributes,
                "shared": {"bool": True},
                "replicas": {"int": decision.replicas},
                "replica": {"int": n},
            },
        )
        for n in range(decision.replicas)
    ]


def build_devices(gpus: Sequence[GpuDevice], sharing: Sharing | None = None) -> list[DraDevice]:
    """Every device of these GPUs, healthy or not, sorted by name; time-sliced ones as replicas."""
    chosen = sharing or Sharing()
    devices: list[DraDevice] = []
    for gpu in gpus:
        for device in amd_devices(gpu) if gpu.vendor == Vendor.AMD else nvidia_devices(gpu):
            devices.extend(time_sliced(device, gpu, chosen))
    return sorted(devices, key=lambda d: d.name)
