"""AMD node labeller labels (`amd.com/gpu.*`, `beta.amd.com/gpu.*`), same names and value formats.

The AMD labeller counts the devices its device plugin advertises: whole GPUs, or each compute
partition of a partitioned GPU (8x MI300X in CPX gives 64). Partitions inherit family, device id,
product name and driver from their GPU and bring their own CU/SIMD count and memory share.

Count-style kinds follow `createLabels`: one distinct value V gives `amd.com/gpu.<kind>=V`,
`beta.amd.com/gpu.<kind>=V` and `beta.amd.com/gpu.<kind>.V=<count>`; several give
`amd.com/gpu.<kind>.V=<count>` and `beta.amd.com/gpu.<kind>.V=<count>` for each V. Devices whose value
could not be read are not counted (the backend logged the file), so one bad file costs one label,
never the others.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuop_common.gpu.models import GpuDevice, Vendor

from gpuop_node_labeller.options import LabelOptions
from gpuop_node_labeller.sanitize import key_with_suffix, value_or_none

PREFIX = "amd.com"
BETA_PREFIX = "beta.amd.com"
MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class AmdDevice:
    """One schedulable AMD device: a whole GPU or one compute partition of it."""

    gpu: GpuDevice
    compute_units: int | None
    simd_count: int | None
    memory_bytes: int | None


def amd_devices(gpus: Iterable[GpuDevice]) -> list[AmdDevice]:
    devices: list[AmdDevice] = []
    for gpu in gpus:
        if gpu.vendor != Vendor.AMD:
            continue
        if gpu.partitions:
            devices.extend(
                AmdDevice(gpu, p.compute_units, p.simd_count, p.memory_bytes) for p in gpu.partitions
            )
        else:
            devices.append(AmdDevice(gpu, gpu.compute_units, gpu.simd_count, gpu.vram_total_bytes))
    return devices


def vram_value(size_bytes: int) -> str:
    """`<G>G` with G = round(MiB / 1024), rounding halves up as Go's math.Round does."""
    return f"{((size_bytes // MIB) + 512) // 1024}G"


def counted_labels(kind: str, values: Sequence[str | None], options: LabelOptions) -> dict[str, str]:
    counts = Counter(v for v in values if v)
    name = f"gpu.{kind}"
    labels: dict[str, str] = {}
    counter_prefixes: list[str] = []
    if len(counts) == 1:
        (value,) = counts
        labels[f"{PREFIX}/{name}"] = value
        if options.beta_labels:
            labels[f"{BETA_PREFIX}/{name}"] = value
            counter_prefixes = [BETA_PREFIX]
    elif counts:
        counter_prefixes = [PREFIX, BETA_PREFIX] if options.beta_labels else [PREFIX]
    if not options.counter_labels:
        return labels
    for value, count in sorted(counts.items()):
        for prefix in counter_prefixes:
            key = key_with_suffix(prefix, name, value)
            if key is not None:
                labels[key] = str(count)
    return labels


def _product(gpu: GpuDevice) -> str | None:
    # The FRU product_name file first, then the marketing name, as the AMD labeller falls back to libdrm.
    return value_or_none(gpu.product_name or gpu.model, space="_")


def _single(values: Iterable[str | None]) -> str | None:
    distinct = set(values)
    if len(distinct) != 1:
        return None
    return distinct.pop()


def _partition_labels(gpus: Sequence[GpuDevice]) -> dict[str, str]:
    labels: dict[str, str] = {}
    keys = [g.partition.key if g.partition else None for g in gpus]
    key = _single(keys)
    if key is not None:
        labels[f"{PREFIX}/gpu.compute-memory-partition"] = key
    # The AMD labeller looks at the first GPU only.
    first = gpus[0].partition
    compute = bool(first and first.available_compute)
    memory = bool(first and first.available_memory)
    labels[f"{PREFIX}/gpu.compute-partitioning-supported"] = str(compute).lower()
    labels[f"{PREFIX}/gpu.memory-partitioning-supported"] = str(memory).lower()
    return labels


def amd_labels(gpus: Sequence[GpuDevice], options: LabelOptions) -> dict[str, str]:
    amd = [g for g in gpus if g.vendor == Vendor.AMD]
    if not amd:
        return {}
    devices = amd_devices(amd)
    labels: dict[str, str] = {}
    kinds: list[tuple[str, list[str | None]]] = [
        ("family", [value_or_none(d.gpu.family) for d in devices]),
        ("device-id", [f"{d.gpu.pci.device_id:04x}" if d.gpu.pci.device_id else None for d in devices]),
        ("product-name", [_product(d.gpu) for d in devices]),
        ("vram", [vram_value(d.memory_bytes) if d.memory_bytes else None for d in devices]),
        ("simd-count", [str(d.simd_count) if d.simd_count else None for d in devices]),
        ("cu-count", [str(d.compute_units) if d.compute_units else None for d in devices]),
    ]
    for kind, values in kinds:
        labels.update(counted_labels(kind, values, options))
    driver = _single(value_or_none(g.driver_version) for g in amd)
    if driver:
        labels[f"{PREFIX}/gpu.driver-version"] = driver
    src_version = _single(value_or_none(g.driver_src_version) for g in amd)
    if src_version:
        labels[f"{PREFIX}/gpu.driver-src-version"] = src_version
    labels.update(_partition_labels(amd))
    return labels
