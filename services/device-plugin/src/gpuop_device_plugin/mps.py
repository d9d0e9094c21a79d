"""NVIDIA MPS, the parts the plugin and the MPS control daemon agree on (pure, plus two file reads).

Layout under `sharing.mps.root` on the host (default `/run/gpuop/mps`), as NVIDIA's
mps-control-daemon keeps it under its `mpsRoot`: `pipe/` (CUDA_MPS_PIPE_DIRECTORY, the control
daemon's socket and FIFOs), `log/` (CUDA_MPS_LOG_DIRECTORY), `shm/` (a tmpfs: the daemon's and every
client's /dev/shm, since MPS clients attach through POSIX shared memory as well as the pipes, and a
container's own /dev/shm is private) and `ready.json`, written by the daemon once it runs with the
node's current settings. The plugin advertises MPS replicas only while
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
DEV_SHM = "/dev/shm"
# World-writable and sticky like a host's /dev/shm: the control daemon starts each MPS server as the
# uid of its first client, and that server creates the segments its clients open.
SHM_MODE = "1777"
# The kernel's own tmpfs default, written out so that a remount after `shmSizeMiB` is unset resets it.
SHM_DEFAULT_SIZE = "50%"


def mps_pipe_dir(mps: Mps) -> str:
    return f"{mps.root.rstrip('/')}/pipe"


def mps_log_dir(mps: Mps) -> str:
    return f"{mps.root.rstrip('/')}/log"


def mps_shm_dir(mps: Mps) -> str:
    return f"{mps.root.rstrip('/')}/shm"


def shm_mount_argv(mps: Mps, *, mounted: bool) -> list[str]:
    """The host command that puts (or, `mounted`, re-sizes) the tmpfs at `<root>/shm`.

    In the host's mount namespace (the chart's Bidirectional mount of the root), so that the clients'
    containers, which mount the host's `<root>/shm`, see the same tmpfs as the daemon."""
    size = f"{mps.shm_size_mib}m" if mps.shm_size_mib is not None else SHM_DEFAULT_SIZE
    options = f"nosuid,nodev,mode={SHM_MODE},size={size}"
    if mounted:
        return ["mount", "-o", f"remount,{options}", mps_shm_dir(mps)]
    return ["mount", "-t", "tmpfs", "-o", options, "tmpfs", mps_shm_dir(mps)]


def shm_mounted_argv(mps: Mps) -> list[str]:
    """The host command that exits 0 exactly when `<root>/shm` is already a mount point."""
    return ["mountpoint", "-q", mps_shm_dir(mps)]


def daemon_start_argv(mps: Mps) -> list[str]:
    """The host command that starts the control daemon with `<root>/shm` as its /dev/shm.

    The bind is made in a mount namespace of its own (`unshare --mount`, private propagation), so only
    the daemon, which forks into the background and keeps that namespace, and the MPS servers it
    starts see it; the host's /dev/shm stays as it is and no client needs it."""
    script = f'mount --bind "$1" {DEV_SHM} && exec {CONTROL_BINARY} -d'
    namespace = ["unshare", "--mount", "--propagation", "private", "--"]
    return [*namespace, "sh", "-c", script, "mps-control", mps_shm_dir(mps)]


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
