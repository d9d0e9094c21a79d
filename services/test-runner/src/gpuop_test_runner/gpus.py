"""The node's GPUs as test targets, and the built-in `gpuop-selfcheck` recipe.

The self-check needs no vendor tool, so it always runs: enumerate through the gpuop_common
backends, open every device node a GPU has (what a workload container would), read telemetry once,
and compare the GPU count with what the node advertises (the labeller's `gpuop.dev/gpu.count`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuop_common.gpu import GpuBackend, GpuDevice, Vendor
from gpuop_common.gpu.amd_topology import read_topology

from gpuop_test_runner.results import GpuResult, GpuTarget


def targets_for(host_root: Path, devices: Sequence[GpuDevice]) -> list[GpuTarget]:
    """Test targets with the KFD gpu_ids RVS names AMD GPUs by."""
    kfd: dict[str, list[int]] = {}
    if any(d.vendor == Vendor.AMD for d in devices):
        for node in read_topology(host_root):
            if node.is_gpu and node.gpu_id is not None:
                kfd.setdefault(node.parent_bdf, []).append(node.gpu_id)
    return [
        GpuTarget(
            id=d.id, index=d.index, pci_address=d.pci_address, kfd_gpu_ids=tuple(kfd.get(d.pci_address, ()))
        )
        for d in devices
    ]


def _open_error(host_root: Path, node: str) -> str | None:
    path = host_root / node.lstrip("/")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return f"cannot open {node}: {exc.strerror or exc}"
    os.close(fd)
    return None


@dataclass(frozen=True)
class SelfCheckReport:
    gpus: list[GpuResult]
    reason: str  # "" when every check passed
    message: str


def selfcheck(
    host_root: Path,
    backends: Sequence[GpuBackend],
    devices: Sequence[GpuDevice],
    wanted: set[str] | None,
    advertised: int | None,
) -> SelfCheckReport:
    """Run the checks on the GPUs in `wanted` (ids; None = all) of `devices` (what `backends`
    enumerated for this run); `advertised` None skips the count check."""
    telemetry_ids: set[str] = set()
    telemetry_errors: list[str] = []
    for backend in backends:
        try:
            telemetry_ids.update(t.gpu_id for t in backend.telemetry())
        except Exception as exc:  # a driver error must fail the check, not the agent
            telemetry_errors.append(f"{backend.vendor} telemetry failed: {type(exc).__name__}: {exc}")
    results = []
    for device in devices:
        if wanted is not None and device.id not in wanted:
            continue
        problems = [e for e in (_open_error(host_root, n) for n in device.device_nodes) if e]
        if not device.device_nodes:
            problems.append("no device nodes")
        if device.id not in telemetry_ids:
            problems.append("no telemetry")
        results.append(
            GpuResult(
                gpu=device.id,
                index=device.index,
                result="failed" if problems else "passed",
                detail="; ".join(problems),
            )
        )
    if advertised is not None and advertised != len(devices):
        return SelfCheckReport(
            results, "GpuCountMismatch", f"node advertises {advertised} GPUs, {len(devices)} found"
        )
    if not devices:
        return SelfCheckReport(results, "NoGpus", "no GPU found")
    if telemetry_errors:
        return SelfCheckReport(results, "TelemetryFailed", "; ".join(telemetry_errors))
    failed = [r for r in results if r.result == "failed"]
    if failed:
        return SelfCheckReport(
            results, "GpuCheckFailed", "; ".join(f"GPU {r.index}: {r.detail}" for r in failed)
        )
    checked = "count not compared (node does not advertise one)" if advertised is None else "count matches"
    return SelfCheckReport(results, "", f"{len(devices)} GPUs enumerated, opened, read; {checked}")
