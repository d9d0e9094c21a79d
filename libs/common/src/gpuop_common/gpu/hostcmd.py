"""Running a command on the node's host from an agent's pod: one prefix, one way to report failure.

An agent that must act on the host (reload amdgpu, run `amd-smi`) runs `<prefix> <command>`, the
prefix being `chroot /host` in a pod with the host's root mounted there and the recording fakes in
the simulator (`gpuop_sim.hostfakes`). A failure is a `HostCommandError` naming the command, its
exit code and the tail of its stderr, which is what a person needs in a status or an Event.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gpuop_common.gpu.errors import GpuBackendError

STDERR_TAIL = 400  # characters of a failed command's stderr kept in the error

Runner = Callable[..., "subprocess.CompletedProcess[str]"]


class HostCommandError(GpuBackendError):
    """A host command could not start, timed out or exited non-zero; the message says which."""

    def __init__(self, message: str, returncode: int | None = None, stderr: str = "") -> None:
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


def host_exec_argv(template: str, host_root: str) -> list[str]:
    """The prefix of each host command: `template` split like a shell would, `{host_root}` filled."""
    argv = shlex.split(template.replace("{host_root}", host_root))
    if not argv:
        raise ValueError("the host-command prefix is empty (e.g. `chroot /host`)")
    return argv


@dataclass(frozen=True)
class HostCommands:
    prefix: tuple[str, ...]  # e.g. ("chroot", "/host")
    timeout_s: float = 300.0
    run: Runner = subprocess.run

    def check(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run `args` on the host; the finished process, or HostCommandError when it failed."""
        argv: Sequence[str] = [*self.prefix, *args]
        command = shlex.join(args)
        try:
            done = self.run(argv, capture_output=True, text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise HostCommandError(f"`{command}` did not finish within {self.timeout_s:g}s") from exc
        except OSError as exc:  # the prefix's program is missing (no chroot, no host mount)
            raise HostCommandError(f"`{command}` could not start: {exc}") from exc
        if done.returncode != 0:
            stderr = (done.stderr or "").strip()
            tail = stderr[-STDERR_TAIL:] or (done.stdout or "").strip()[-STDERR_TAIL:] or "no output"
            raise HostCommandError(
                f"`{command}` failed (exit {done.returncode}): {tail}", done.returncode, stderr
            )
        return done
