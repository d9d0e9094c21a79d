"""Reloading the amdgpu kernel module on the host, so a requested memory partition comes into force.

The driver takes a `current_memory_partition` write as a request for its next load (amdgpu-sysfs.md
section 3.1; `AmdSysfsBackend.set_partition_mode` reports it as `pending_memory`). AMD's own tools
reload the module for it (`amdsmi_gpu_driver_reload`: `modprobe -r amdgpu && modprobe amdgpu`, with
every process using the GPUs stopped first); so does this, through a host-command prefix
(`chroot /host` in a pod with the host's root mounted there, the recording fakes in the simulator).
The caller quiesces the GPUs first: `modprobe -r` refuses a module in use.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuop_common.gpu.errors import GpuBackendError

MODULE = "amdgpu"
STDERR_TAIL = 400  # characters of a failed command's stderr kept in the error


class DriverReloadError(GpuBackendError):
    """A host command of the reload failed; the message names it, its exit code and stderr."""


Runner = Callable[..., "subprocess.CompletedProcess[str]"]


def host_exec_argv(template: str, host_root: str) -> list[str]:
    """The prefix of each host command: `template` split like a shell would, `{host_root}` filled."""
    argv = shlex.split(template.replace("{host_root}", host_root))
    if not argv:
        raise ValueError("the host-command prefix is empty (e.g. `chroot /host`)")
    return argv


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
        argv: Sequence[str] = [*self.host_exec, "modprobe", *args]
        command = "modprobe " + " ".join(args)
        try:
            done = self.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise DriverReloadError(f"`{command}` did not finish within {self.timeout_s:g}s") from exc
        except OSError as exc:  # the prefix's program is missing (no chroot, no host mount)
            raise DriverReloadError(f"`{command}` could not start: {exc}") from exc
        if done.returncode != 0:
            stderr = (done.stderr or "").strip()[-STDERR_TAIL:] or "no output"
            raise DriverReloadError(f"`{command}` failed (exit {done.returncode}): {stderr}")
