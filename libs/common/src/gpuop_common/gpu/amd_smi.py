"""AMD partition writes through the host's `amd-smi`, for nodes where AMD's tool is installed.

`amd-smi set --gpu <BDF> --compute-partition <SPX..CPX>` / `--memory-partition <NPSn>` asks the same
driver for the same change the sysfs attributes take (amdgpu-sysfs.md section 3.1), through the AMD
SMI library: some of its releases also reload amdgpu themselves for a memory partition. The AMD
backend reads the attribute back after each write either way, so a memory partition still waiting
for a reload is seen and reloaded by the caller, and one already in force is not.

`AmdSmiWriter` has the signature of `sysfs_write.write_attr` (the AMD backend's one write path): the
GPU is named by the PCI address of the attribute's device directory, and the tool's failure comes
back as the OSError the kernel would give (EBUSY, EINVAL, ...), read from the AMDSMI status in its
output, with `via` naming the command for the error message.
"""

from __future__ import annotations

import errno
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from gpuop_common.gpu.amd_partition import COMPUTE_ATTR, MEMORY_ATTR
from gpuop_common.gpu.hostcmd import HostCommandError, HostCommands

TOOL = "amd-smi"
OPTIONS = {COMPUTE_ATTR: "--compute-partition", MEMORY_ATTR: "--memory-partition"}
_BDF = re.compile(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_STATUS = re.compile(r"AMDSMI_STATUS_[A-Z_]+")
# AMD SMI status names (amdsmi.h amdsmi_status_t) as the errno the sysfs store would give.
_ERRNO_OF_STATUS = {
    "AMDSMI_STATUS_BUSY": errno.EBUSY,
    "AMDSMI_STATUS_INVAL": errno.EINVAL,
    "AMDSMI_STATUS_INVALID_ARGS": errno.EINVAL,
    "AMDSMI_STATUS_NOT_SUPPORTED": errno.EOPNOTSUPP,
    "AMDSMI_STATUS_NO_PERM": errno.EPERM,
    "AMDSMI_STATUS_NOT_FOUND": errno.ENODEV,
    "AMDSMI_STATUS_TIMEOUT": errno.ETIMEDOUT,
}
COMMAND_NOT_FOUND = 127  # what a shell (and chroot) answers for a program that is not there


class ToolWriteError(OSError):
    """A partition write through a tool failed; `via` is the command, errno what the driver said."""

    def __init__(self, code: int, detail: str, via: str) -> None:
        super().__init__(code, detail)
        self.via = via


def errno_of_output(text: str) -> int:
    """The errno an `amd-smi set` failure stands for: from the first AMDSMI status it prints (EIO
    when it names none we know)."""
    for status in _STATUS.findall(text):
        if status in _ERRNO_OF_STATUS:
            return _ERRNO_OF_STATUS[status]
    return errno.EIO


def pci_address_of(attr_path: Path) -> str:
    """The PCI address of the GPU whose partition attribute this is: the kernel names a PCI device's
    directory by its address, and `/sys/class/drm/cardN/device` or `/sys/bus/pci/devices/<BDF>`
    lead there."""
    name = attr_path.parent.resolve().name.lower()
    if not _BDF.match(name):
        raise ToolWriteError(errno.ENODEV, f"{attr_path.parent} is not a PCI device directory", f"{TOOL} set")
    return name


@dataclass(frozen=True)
class AmdSmiWriter:
    """Writes a partition attribute as `<host prefix> amd-smi set --gpu <BDF> --<kind>-partition <MODE>`."""

    host: HostCommands

    def __call__(self, path: Path, value: str) -> None:
        option = OPTIONS.get(path.name)
        if option is None:
            raise ToolWriteError(errno.EINVAL, f"{TOOL} does not set {path.name}", f"{TOOL} set")
        args = (TOOL, "set", "--gpu", pci_address_of(path), option, value)
        via = shlex.join(args)
        try:
            self.host.check(*args)
        except HostCommandError as exc:
            if exc.returncode is None:  # never ran: no host mount, timed out
                raise ToolWriteError(errno.EIO, str(exc), via) from exc
            if exc.returncode == COMMAND_NOT_FOUND:
                raise ToolWriteError(errno.ENOENT, f"{TOOL} is not installed on the host", via) from exc
            raise ToolWriteError(errno_of_output(exc.stderr or str(exc)), str(exc), via) from exc


def amd_smi_on_host(host: HostCommands) -> str | None:
    """`amd-smi version`'s first line when the tool runs on the host, None when it does not."""
    try:
        done = host.check(TOOL, "version")
    except HostCommandError:
        return None
    lines = (done.stdout or "").strip().splitlines()
    return lines[0] if lines else TOOL


def partition_writer(tool: str, host: HostCommands | None) -> tuple[AmdSmiWriter | None, str]:
    """The writer for `tool` (`auto`, `sysfs`, `amd-smi`) and a line saying what was chosen.

    None means the sysfs attributes (the backend's default). `auto` takes amd-smi when it runs on
    the host; `amd-smi` takes it even when it does not, so each write fails naming it.
    """
    if tool == "sysfs" or host is None:
        reason = "" if tool == "sysfs" else " (no host commands: --host-exec)"
        return None, f"partition writes through the sysfs attributes{reason}"
    if tool == "amd-smi":
        return AmdSmiWriter(host), f"partition writes through {TOOL} on the host"
    if tool != "auto":
        raise ValueError(f"unknown partition tool {tool!r} (allowed: auto, sysfs, amd-smi)")
    version = amd_smi_on_host(host)
    if version is None:
        return None, f"partition writes through the sysfs attributes ({TOOL} does not run on the host)"
    return AmdSmiWriter(host), f"partition writes through {TOOL} on the host ({version})"
