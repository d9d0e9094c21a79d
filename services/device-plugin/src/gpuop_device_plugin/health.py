"""Per-device health from the backend's per-GPU health report (pure functions).

A device is Unhealthy when its physical GPU has a reason (KFD node gone, gfx_target_version 0,
device node gone, RAS uncorrectable errors beyond the threshold, critical XID, GPU lost) or when its
own partition / MIG device has one. Other GPUs of the node are never affected.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuop_common.config.device_plugin import HealthChecks
from gpuop_common.gpu import GpuHealth, GpuTelemetry, HealthReason

from gpuop_device_plugin.devices import HEALTHY, UNHEALTHY, PluginDevice

RAS_REASON = "ras_uncorrectable_increase"


@dataclass(frozen=True, slots=True)
class HealthVerdict:
    """Health of every advertised device id, with the reasons of the unhealthy ones."""

    states: dict[str, str]
    reasons: dict[str, tuple[HealthReason, ...]]

    def unhealthy(self) -> list[str]:
        return sorted(dev for dev, state in self.states.items() if state != HEALTHY)


def uncorrectable_totals(telemetry: Iterable[GpuTelemetry]) -> dict[str, int]:
    """Sum of uncorrectable error counts per physical GPU (whole-GPU readings only)."""
    totals: dict[str, int] = {}
    for reading in telemetry:
        if reading.partition_id is not None:
            continue
        blocks = reading.ecc
        # `total` (NVIDIA) already sums the blocks; AMD reports per RAS block.
        counts = [blocks["total"]] if "total" in blocks else list(blocks.values())
        totals[reading.gpu_id] = sum(c.uncorrectable or 0 for c in counts)
    return totals


def ras_within_threshold(
    gpu_id: str, baseline: Mapping[str, int], current: Mapping[str, int], threshold: int
) -> bool:
    """True when the rise in uncorrectable errors since the baseline is at most `threshold`."""
    if threshold <= 0 or gpu_id not in current:
        return False  # no tolerance, or no reading to compare: the backend's rise counts
    return current[gpu_id] - baseline.get(gpu_id, 0) <= threshold


def effective_reasons(
    report: GpuHealth,
    settings: HealthChecks,
    ras_baseline: Mapping[str, int],
    ras_current: Mapping[str, int],
) -> tuple[HealthReason, ...]:
    """The GPU's reasons after the RAS threshold: a RAS rise within the tolerance is not a fault."""
    reasons = list(report.reasons)
    if settings.ras_uncorrectable_threshold > 0 and ras_within_threshold(
        report.gpu_id, ras_baseline, ras_current, settings.ras_uncorrectable_threshold
    ):
        reasons = [r for r in reasons if r.code != RAS_REASON]
    return tuple(reasons)


def evaluate(
    devices: Sequence[PluginDevice],
    reports: Sequence[GpuHealth],
    settings: HealthChecks,
    *,
    sticky: Iterable[str] = (),
    ras_baseline: Mapping[str, int] | None = None,
    ras_current: Mapping[str, int] | None = None,
) -> HealthVerdict:
    """Health per device id.

    `sticky` are device ids that failed before: without `recoverAutomatically` they stay Unhealthy.
    A GPU missing from the reports (the backend no longer knows it) is Unhealthy.
    """
    if not settings.enable:
        return HealthVerdict({d.id: HEALTHY for d in devices}, {})
    by_gpu = {report.gpu_id: report for report in reports}
    baseline = ras_baseline or {}
    current = ras_current or {}
    gpu_reasons = {gid: effective_reasons(r, settings, baseline, current) for gid, r in by_gpu.items()}
    part_reasons = {p.id: p.reasons for r in reports for p in r.partitions}
    still_failed = set(sticky) if not settings.recover_automatically else set()
    states: dict[str, str] = {}
    reasons: dict[str, tuple[HealthReason, ...]] = {}
    for device in devices:
        if device.physical_id not in by_gpu:
            found: tuple[HealthReason, ...] = (
                HealthReason("gpu_unknown", f"GPU {device.physical_id} is not reported by the driver"),
            )
        else:
            found = gpu_reasons[device.physical_id] + part_reasons.get(device.base_id, ())
        if not found and device.id in still_failed:
            found = (HealthReason("not_recovered", "failed earlier; recoverAutomatically is off"),)
        states[device.id] = UNHEALTHY if found else HEALTHY
        if found:
            reasons[device.id] = found
    return HealthVerdict(states, reasons)
