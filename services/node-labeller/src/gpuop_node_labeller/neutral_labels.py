"""Vendor-neutral labels under `gpuop.dev/`: one meaning for AMD and NVIDIA nodes alike.

Rules: counts are of physical GPUs; a descriptive label holds the value every GPU shares, or `mixed`
when they differ; `gpu.memory-mib` is the smallest GPU's memory, so `Gt` node affinity on it means
"every GPU here has at least that much"; a label whose value could not be read on some GPU is left
out rather than guessed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gpuop_common.config.sharing import Sharing
from gpuop_common.gpu.models import GpuDevice
from gpuop_common.gpu.sharing import gpu_sharing

from gpuop_node_labeller.sanitize import sanitise, value_or_none

PREFIX = "gpuop.dev"
MIXED = "mixed"
MIB = 1 << 20


def shared(values: Iterable[str | None]) -> str | None:
    """The common value, `mixed` when they differ, None when any is unknown."""
    distinct = set(values)
    if not distinct or None in distinct:
        return None
    if len(distinct) > 1:
        return MIXED
    value = distinct.pop()
    return value


def compute_mode(gpu: GpuDevice) -> str | None:
    """AMD `spx`..`cpx`, NVIDIA `mig`/`none`; `none` for GPUs that cannot be partitioned."""
    if gpu.partition is None:
        return "none"
    if gpu.partition.compute is None:
        return None
    return value_or_none(gpu.partition.compute.lower())


def memory_mode(gpu: GpuDevice) -> str | None:
    """AMD `nps1`..`nps8`; `none` where the GPU has no memory partitioning (all NVIDIA GPUs)."""
    state = gpu.partition
    if state is None or (state.memory is None and not state.available_memory):
        return "none"
    if state.memory is None:
        return None
    return value_or_none(state.memory.lower())


def partition_count(gpu: GpuDevice) -> int:
    """Schedulable partitions; a GPU listed as its own single partition is not partitioned."""
    amd = len(gpu.partitions) if len(gpu.partitions) > 1 else 0
    return amd + len(gpu.mig_devices)


def sharing_values(gpus: Sequence[GpuDevice], sharing: Sharing) -> dict[str, str | None]:
    """`gpu.replicas` (pods per GPU, `mixed` when models differ) and `gpu.sharing-strategy`."""
    found = [gpu_sharing(g, sharing) for g in gpus]
    return {
        "gpu.replicas": shared(str(f.replicas) if f else "1" for f in found),
        "gpu.sharing-strategy": shared(f.strategy if f else "none" for f in found),
    }


def neutral_labels(gpus: Sequence[GpuDevice], sharing: Sharing | None = None) -> dict[str, str]:
    labels = {f"{PREFIX}/gpu.present": str(bool(gpus)).lower(), f"{PREFIX}/gpu.count": str(len(gpus))}
    if not gpus:
        return labels
    memories = [g.vram_total_bytes for g in gpus]
    values: dict[str, str | None] = {
        "gpu.vendor": shared(g.vendor.value for g in gpus),
        "gpu.model": shared(sanitise(g.model, "-") or None for g in gpus),
        "gpu.device-id": shared(f"{g.pci.device_id:04x}" if g.pci.device_id else None for g in gpus),
        "gpu.architecture": shared(value_or_none(g.architecture) for g in gpus),
        "gpu.driver-version": shared(value_or_none(g.driver_version) for g in gpus),
        "gpu.memory-mib": None if None in memories else str(min(m // MIB for m in memories if m is not None)),
        "gpu.partition.compute": shared(compute_mode(g) for g in gpus),
        "gpu.partition.memory": shared(memory_mode(g) for g in gpus),
        "gpu.partition.count": str(sum(partition_count(g) for g in gpus)),
        **sharing_values(gpus, sharing or Sharing()),
    }
    labels.update({f"{PREFIX}/{name}": value for name, value in values.items() if value is not None})
    return labels
