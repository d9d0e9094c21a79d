"""Health of every device of the node, from the backends' health reports (pure).

One rule serves both consumers. The ResourceSlice publishes the present devices that are healthy,
so the scheduler places no new claim on a bad one. The kubelet's health stream names them all,
bad ones included, so a pod that already holds a device learns that it went bad and why.

A device is Unhealthy when its GPU or the device itself (partition, MIG device) has a health reason;
its reasons are the codes of both. It is Unknown when its vendor's health could not be read this
pass, or the backend's report does not name its GPU. A GPU or partition that vanished since it was
enumerated stays known while the backend still reports it (as unhealthy: `gpu_vanished`,
`device_lost`, `kfd_node_vanished`), which it does until its health baseline is re-taken.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gpuop_common.config.sharing import Sharing
from gpuop_common.gpu import GpuDevice, GpuHealth, HealthReason
from gpuop_common.gpu.changes import merge_inventory

from gpuop_dra_driver.devices import DraDevice, build_devices

# Reason codes of our own, for devices whose health nobody reported.
HEALTH_UNREADABLE = "health_unreadable"  # the vendor's health read failed this pass
NOT_REPORTED = "gpu_not_reported"  # the backend's health report does not name the GPU


class Health(enum.StrEnum):
    HEALTHY = "Healthy"
    UNHEALTHY = "Unhealthy"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class DeviceHealthState:
    device: str  # the DRA device name, as in the ResourceSlice
    health: Health
    reasons: tuple[str, ...] = ()  # reason codes, each once, in report order

    @property
    def message(self) -> str:
        return ", ".join(self.reasons)


def reasons_by_id(reports: Sequence[GpuHealth]) -> dict[str, tuple[HealthReason, ...]]:
    """GPU and partition id -> its own health reasons, for every id the reports name."""
    found = {r.gpu_id: r.reasons for r in reports}
    found |= {p.id: p.reasons for r in reports for p in r.partitions}
    return found


def _state(device: DraDevice, reasons: dict[str, tuple[HealthReason, ...]]) -> DeviceHealthState:
    if device.gpu_id not in reasons:
        return DeviceHealthState(device.name, Health.UNKNOWN, (NOT_REPORTED,))
    own = reasons.get(device.uid, ()) if device.uid != device.gpu_id else ()
    codes = tuple(dict.fromkeys(r.code for r in (*reasons[device.gpu_id], *own)))
    return DeviceHealthState(device.name, Health.UNHEALTHY if codes else Health.HEALTHY, codes)


def device_health(
    gpus: Sequence[GpuDevice],
    reports: Sequence[GpuHealth],
    failed_vendors: Collection[str] = (),
    sharing: Sharing | None = None,
) -> list[DeviceHealthState]:
    """The health of every device of these GPUs (time-sliced ones as their replicas), sorted by name."""
    reasons = reasons_by_id(reports)
    return [
        DeviceHealthState(d.name, Health.UNKNOWN, (HEALTH_UNREADABLE,))
        if str(d.vendor) in failed_vendors
        else _state(d, reasons)
        for d in build_devices(gpus, sharing)
    ]


def known_gpus(
    previous: Sequence[GpuDevice],
    current: Sequence[GpuDevice],
    reports: Sequence[GpuHealth],
    failed_vendors: Collection[str] = (),
) -> list[GpuDevice]:
    """The GPUs whose devices the health stream names: the enumerated ones, and the ones (or the
    partitions) that vanished while their backend still reports them or cannot be read."""
    present = {g.id for g in current}
    reported = {r.gpu_id for r in reports}
    return [
        g
        for g in merge_inventory(previous, current)
        if g.id in present or g.id in reported or str(g.vendor) in failed_vendors
    ]


def healthy_devices(
    gpus: Sequence[GpuDevice], states: Sequence[DeviceHealthState], sharing: Sharing | None = None
) -> list[DraDevice]:
    """The devices of these (present) GPUs that `states` calls healthy: what the slice publishes."""
    healthy = {s.device for s in states if s.health is Health.HEALTHY}
    return [d for d in build_devices(gpus, sharing) if d.name in healthy]
