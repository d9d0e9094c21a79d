"""NVIDIA MPS, the parts the plugin and the MPS control daemon agree on (pure, plus two file reads).

Layout under `sharing.mps.root` on the host (default `/run/gpuop/mps`), as NVIDIA's
mps-control-daemon keeps it under its `mpsRoot`: `pipe/` (CUDA_MPS_PIPE_DIRECTORY, the control
daemon's socket and FIFOs), `log/` (CUDA_MPS_LOG_DIRECTORY) and `ready.json`, written by the daemon
once it runs with the node's current settings. The plugin advertises MPS replicas only while
`ready.json` matches what it would advertise, so no pod gets a replica without a daemon behind it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from gpuop_common.config.sharing import Mps
from gpuop_common.gpu import GpuDevice, Vendor

READY_FILE = "ready.json"
CONTROL_BINARY = "nvidia-cuda-mps-control"
MIB = 1 << 20


def mps_pipe_dir(mps: Mps) -> str:
    return f"{mps.root.rstrip('/')}/pipe"


def mps_log_dir(mps: Mps) -> str:
    return f"{mps.root.rstrip('/')}/log"


def client_memory_limit_mib(gpu: GpuDevice, mps: Mps) -> int | None:
    """Pinned device memory per client: the configured limit, else an equal share of the GPU."""
    if mps.memory_limit_mib is not None:
        return mps.memory_limit_mib
    return gpu.vram_total_bytes // MIB // mps.replicas if gpu.vram_total_bytes else None


def thread_percentage(mps: Mps) -> int:
    return mps.active_thread_percentage or max(1, 100 // mps.replicas)


def mps_gpus(gpus: Sequence[GpuDevice]) -> list[GpuDevice]:
    """The GPUs MPS serves: whole NVIDIA GPUs without MIG."""
    return [
        g
        for g in gpus
        if g.vendor == Vendor.NVIDIA and not (g.partition is not None and g.partition.compute == "mig")
    ]


@dataclass(frozen=True, slots=True)
class DaemonState:
    """What the control daemon runs with; `ready.json` holds it, the plugin compares it."""

    gpus: tuple[str, ...]
    replicas: int
    active_thread_percentage: int
    memory_limits_mib: dict[str, int]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True) + "\n"


def daemon_state(gpus: Sequence[GpuDevice], mps: Mps) -> DaemonState:
    served = mps_gpus(gpus)
    limits = {g.id: limit for g in served if (limit := client_memory_limit_mib(g, mps)) is not None}
    return DaemonState(tuple(sorted(g.id for g in served)), mps.replicas, thread_percentage(mps), limits)


def control_commands(state: DaemonState) -> list[str]:
    """The `nvidia-cuda-mps-control` commands that set the per-client defaults (NVIDIA's daemon
    sends the same: `internal/mps/daemon.go`)."""
    commands = [f"set_default_active_thread_percentage {state.active_thread_percentage}"]
    commands += [
        f"set_default_device_pinned_mem_limit {uuid} {mib}M"
        for uuid, mib in sorted(state.memory_limits_mib.items())
    ]
    return commands


def read_ready(host_root: Path, mps: Mps) -> DaemonState | None:
    """The state the daemon says it runs with; None when it is not running (no or bad file)."""
    path = host_root / mps.root.lstrip("/") / READY_FILE
    try:
        raw = json.loads(path.read_text())
        return DaemonState(
            tuple(raw["gpus"]), int(raw["replicas"]), int(raw["active_thread_percentage"]),
            {str(k): int(v) for k, v in raw["memory_limits_mib"].items()},
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def daemon_ready(host_root: Path, gpus: Sequence[GpuDevice], mps: Mps) -> bool:
    """The daemon runs with exactly the settings these GPUs and this config call for."""
    return read_ready(host_root, mps) == daemon_state(gpus, mps)
