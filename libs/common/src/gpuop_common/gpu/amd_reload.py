"""Reloading the amdgpu kernel module on the host, so a requested memory partition comes into force.

The driver takes a `current_memory_partition` write as a request for its next load (amdgpu-sysfs.md
section 3.1; `AmdSysfsBackend.set_partition_mode` reports it as `pending_memory`). AMD's own tools
reload the module for it (`amdsmi_gpu_driver_reload`: `modprobe -r amdgpu && modprobe amdgpu`, with
every process using the GPUs stopped first); so does this, through a host-command prefix
(`chroot /host` in a pod with the host's root mounted there, the recording fakes in the simulator).
The caller quiesces the GPUs first: `modprobe -r` refuses a module in use.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from gpuop_common.gpu.hostcmd import HostCommandError, HostCommands, Runner, host_exec_argv

MODULE = "amdgpu"

__all__ = ["MODULE", "DriverReloadError", "DriverReloader", "host_exec_argv"]


class DriverReloadError(HostCommandError):
    """A host command of the reload failed, reloading is off, or the GPUs did not come back."""


@dataclass(frozen=True)
class DriverReloader:
    host_exec: tuple[str, ...]  # e.g. ("chroot", "/host")
    timeout_s: float = 300.0  # per command: unloading waits for the GPUs to be released
    run: Runner = subprocess.run

    def reload(self) -> None:
        """Unload, then load, amdgpu; raises DriverReloadError naming the step that failed."""
        self._modprobe("-r", MODULE)
        self.load()

    def load(self) -> None:
        """Load amdgpu (nothing happens when it is loaded): the second half of a reload, alone
        when a restarted agent finds a reload it began."""
        self._modprobe(MODULE)

    def _modprobe(self, *args: str) -> None:
        try:
            HostCommands(self.host_exec, self.timeout_s, self.run).check("modprobe", *args)
        except HostCommandError as exc:
            raise DriverReloadError(str(exc), exc.returncode, exc.stderr) from exc
