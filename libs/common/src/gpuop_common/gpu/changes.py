"""Noticing inventory changes cheaply: what the device plugin and the DRA driver poll.

Enumeration is the expensive read; health is cheap. Both agents read health on every pass and
enumerate again only when the set of health reasons changes (a vanished partition or a new
partition mode shows up in health first) or on request. When a GPU's partition mode changed, the
backends' health baseline must be re-taken, or the new partitions would read as vanished ones.
`merge_inventory` keeps what vanished since the last enumeration, so both agents can go on naming
(as unhealthy) a GPU or partition a pod may still hold.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gpuop_common.gpu.base import GpuBackend
from gpuop_common.gpu.errors import GpuBackendError
from gpuop_common.gpu.models import GpuDevice, GpuHealth

log = logging.getLogger(__name__)

ReasonKey = frozenset[tuple[str, str]]


def enumerate_all(backends: Sequence[GpuBackend]) -> list[GpuDevice]:
    """Every backend's GPUs; a backend that fails is logged and left out (its GPUs are absent)."""
    found: list[GpuDevice] = []
    for backend in backends:
        try:
            found.extend(backend.enumerate())
        except (GpuBackendError, OSError) as exc:
            log.error("GPU enumeration failed", extra={"vendor": str(backend.vendor), "error": str(exc)})
    return found


def health_all(backends: Sequence[GpuBackend]) -> tuple[list[GpuHealth], set[str]]:
    """Every backend's health reports and the vendors whose read failed (logged). A failed
    vendor's GPUs are not reported, which both agents treat as unhealthy (unknown)."""
    reports: list[GpuHealth] = []
    failed: set[str] = set()
    for backend in backends:
        try:
            reports.extend(backend.health())
        except (GpuBackendError, OSError) as exc:
            failed.add(str(backend.vendor))
            log.error("GPU health check failed", extra={"vendor": str(backend.vendor), "error": str(exc)})
    return reports, failed


def health_reason_key(reports: Sequence[GpuHealth]) -> ReasonKey:
    """(device id, reason code) of every GPU- and partition-level health reason."""
    keys = {(r.gpu_id, reason.code) for r in reports for reason in r.reasons}
    keys |= {(p.id, reason.code) for r in reports for p in r.partitions for reason in p.reasons}
    return frozenset(keys)


def partition_modes(gpus: Sequence[GpuDevice]) -> dict[str, str | None]:
    """GPU id -> `<compute>_<memory>` partition key (None when not partitionable)."""
    return {g.id: g.partition.key if g.partition else None for g in gpus}


def changed_partition_modes(before: Sequence[GpuDevice], after: Sequence[GpuDevice]) -> list[str]:
    """Ids of GPUs present in both whose partition mode differs."""
    old = partition_modes(before)
    return [gid for gid, mode in partition_modes(after).items() if gid in old and old[gid] != mode]


def merge_inventory(previous: Sequence[GpuDevice], current: Sequence[GpuDevice]) -> list[GpuDevice]:
    """The GPUs to advertise: what the backend sees now, plus what it lost since.

    A GPU or partition that vanished stays listed (and turns Unhealthy) rather than silently
    shrinking the node's capacity; a GPU whose partition mode changed is taken as it is now, since
    its old partitions were reconfigured, not lost.
    """
    now = {gpu.id: gpu for gpu in current}
    merged: list[GpuDevice] = []
    for old in previous:
        new = now.pop(old.id, None)
        if new is None:
            merged.append(old)
            continue
        same_mode = (old.partition.key if old.partition else None) == (
            new.partition.key if new.partition else None
        )
        lost_partitions = {p.id for p in old.partitions} - {p.id for p in new.partitions}
        merged.append(old if same_mode and lost_partitions else new)
    merged.extend(now.values())
    return sorted(merged, key=lambda gpu: (gpu.vendor, gpu.index, gpu.pci_address))
