"""gpuop-mps-control-daemon: runs NVIDIA's MPS control daemon on a node whose config asks for MPS.

Its own DaemonSet in the device-plugin chart (as NVIDIA's `mps-control-daemon`). It reads the same
`devicePlugin` ConfigMap as the plugin; with `sharing.mps` set it mounts a tmpfs at `<root>/shm` and
starts `nvidia-cuda-mps-control -d` on the host (through `--host-exec`, `chroot /host` in the pod),
with that tmpfs bound over /dev/shm in its own mount namespace, for the node's whole NVIDIA GPUs,
sets the per-client defaults (active thread percentage, pinned memory per GPU), and then writes
`ready.json` under `sharing.mps.root`; the plugin advertises MPS replicas only after that. On a
config change the defaults are re-sent (and `ready.json` rewritten); with MPS off, or on SIGTERM,
the daemon is told to `quit` and `ready.json` goes, so the plugin stops advertising replicas.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from gpuop_common.config import DevicePluginConfig
from gpuop_common.config.sharing import Mps
from gpuop_common.configfile import ConfigFileWatcher
from gpuop_common.gpu import GpuBackend, GpuBackendError, open_backends
from gpuop_common.gpu.changes import enumerate_all
from gpuop_common.gpu.hostcmd import host_exec_argv
from gpuop_common.gpu.sharing import mps_problems
from gpuop_common.settings import ConfigFileAgentSettings
from gpuop_common.shutdown import ServiceContext, run_service
from pydantic import Field

from gpuop_device_plugin.mps import (
    CONTROL_BINARY,
    READY_FILE,
    DaemonState,
    control_commands,
    daemon_start_argv,
    daemon_state,
    mps_log_dir,
    mps_pipe_dir,
    mps_shm_dir,
    shm_mount_argv,
    shm_mounted_argv,
)

log = logging.getLogger(__name__)

SERVICE = "mps-control-daemon"
COMMAND_TIMEOUT_S = 30.0


class MpsDaemonSettings(ConfigFileAgentSettings):
    host_exec: str = Field(
        "chroot /host",
        min_length=1,
        description="Prefix of the host commands (`nvidia-cuda-mps-control`); `{host_root}` is replaced.",
    )


class MpsCommandError(RuntimeError):
    pass


class MpsControl:
    """Host commands of the MPS setup (through the host-exec prefix), with the MPS directories in
    their environment: the tmpfs mount, the daemon's start and `nvidia-cuda-mps-control` commands."""

    def __init__(self, prefix: Sequence[str]) -> None:
        self.prefix = list(prefix)

    def _run(self, mps: Mps, argv: Sequence[str], stdin: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "CUDA_MPS_PIPE_DIRECTORY": mps_pipe_dir(mps),
            "CUDA_MPS_LOG_DIRECTORY": mps_log_dir(mps),
        }
        try:
            return subprocess.run(
                [*self.prefix, *argv],
                input=stdin,
                env=env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise MpsCommandError(f"{shlex.join(argv)} could not run: {exc}") from exc

    def run(self, mps: Mps, argv: Sequence[str], commands: Sequence[str] = ()) -> None:
        done = self._run(mps, argv, "".join(f"{c}\n" for c in commands))
        if done.returncode != 0:
            tail = (done.stderr or done.stdout or "no output").strip()[-400:]
            raise MpsCommandError(f"{shlex.join(argv)} failed (exit {done.returncode}): {tail}")

    def succeeds(self, mps: Mps, argv: Sequence[str]) -> bool:
        return self._run(mps, argv, "").returncode == 0

    def send(self, mps: Mps, commands: Sequence[str]) -> None:
        """Commands to the running control daemon, on the client's stdin."""
        self.run(mps, [CONTROL_BINARY], commands)


class MpsDaemonManager:
    """Keeps the host's MPS control daemon in step with the config (one `apply` per change)."""

    def __init__(self, host_root: Path, backends: Sequence[GpuBackend], control: MpsControl) -> None:
        self.host_root = Path(host_root)
        self.backends = list(backends)
        self.control = control
        self.running: Mps | None = None  # the settings the started daemon has
        self.state: DaemonState | None = None

    def _dir(self, mps: Mps) -> Path:
        return self.host_root / mps.root.lstrip("/")

    def apply(self, config: DevicePluginConfig) -> None:
        mps = config.sharing.mps
        if mps is None:
            self.stop()
            return
        gpus = enumerate_all(self.backends)
        for problem in mps_problems(gpus, config.sharing):
            log.error("MPS cannot serve a GPU", extra={"error": problem})
        state = daemon_state(gpus, mps)
        if not state.gpus:
            log.error("sharing.mps: no whole NVIDIA GPU on this node; MPS control daemon not started")
            self.stop()
            return
        if self.running is not None and self.running.root != mps.root:
            self.stop()
        if self.running is None:
            for sub in (mps_pipe_dir(mps), mps_log_dir(mps), mps_shm_dir(mps)):
                (self.host_root / sub.lstrip("/")).mkdir(parents=True, exist_ok=True)
            # Mounted already when this pod restarted (the tmpfs outlives it on the host): re-sized.
            mounted = self.control.succeeds(mps, shm_mounted_argv(mps))
            self.control.run(mps, shm_mount_argv(mps, mounted=mounted))
            self.control.run(mps, daemon_start_argv(mps))
            log.info("MPS control daemon started", extra={"gpus": list(state.gpus)})
        elif self.running.shm_size_mib != mps.shm_size_mib:
            self.control.run(mps, shm_mount_argv(mps, mounted=True))  # tmpfs re-sizes in place
        self.running = mps
        if state != self.state:
            self.control.send(mps, control_commands(state))
            _write_atomic(self._dir(mps) / READY_FILE, state.to_json())
            self.state = state
            log.info("MPS defaults set", extra={"commands": control_commands(state)})

    def stop(self) -> None:
        if self.running is None:
            return
        mps, self.running, self.state = self.running, None, None
        (self._dir(mps) / READY_FILE).unlink(missing_ok=True)  # first: no new replica without a daemon
        try:
            self.control.send(mps, ["quit"])
        except MpsCommandError as exc:
            log.warning("stopping the MPS control daemon failed", extra={"error": str(exc)})
        log.info("MPS control daemon stopped")


def _write_atomic(path: Path, text: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, prefix=".ready-") as tmp:
        tmp.write(text)
    os.replace(tmp.name, path)


def serve(ctx: ServiceContext[MpsDaemonSettings]) -> int:
    s = ctx.settings
    try:
        backends = open_backends(s.host_root, "nvidia")
    except GpuBackendError as exc:
        log.error("cannot open the NVIDIA backend", extra={"error": str(exc)})
        return 1
    watcher = ConfigFileWatcher.load(
        s.config_file, DevicePluginConfig, interval=s.config_poll_interval, node_name=s.node_name
    )
    manager = MpsDaemonManager(
        s.host_root, backends, MpsControl(host_exec_argv(s.host_exec, str(s.host_root)))
    )

    def apply(config: DevicePluginConfig) -> None:
        try:
            manager.apply(config)
        except (MpsCommandError, GpuBackendError, OSError) as exc:
            log.error("MPS control daemon not ready", extra={"error": str(exc)})

    ctx.probes.add_readiness_check("config", lambda: watcher.error is None)
    try:
        apply(watcher.config)
        if s.once:
            return 0 if (watcher.config.sharing.mps is None or manager.state is not None) else 1
        watcher.set_on_change(apply)
        watcher.start_in_thread(ctx.stopping)
        ctx.probes.set_ready(True)
        ctx.stopping.wait()
    finally:
        manager.stop()
        for backend in backends:
            backend.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(MpsDaemonSettings, serve, service=SERVICE, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
