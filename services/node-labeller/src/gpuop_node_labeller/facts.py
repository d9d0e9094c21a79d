"""Checks on the free-text facts the backends pass through unparsed (partition modes, driver versions,
module srcversion).

The backends parse numbers and log a bad file themselves; text files (`current_compute_partition`,
`module/version`) arrive as read. A garbage value must not become a label, so it is dropped here with
a log line naming the file it came from, and only the labels built from it go missing.
"""

from __future__ import annotations

import dataclasses
import logging
import re

from gpuop_common.gpu.models import GpuDevice, Vendor

log = logging.getLogger(__name__)

AMD_COMPUTE_MODES = frozenset({"SPX", "DPX", "TPX", "QPX", "CPX"})
AMD_MEMORY_MODE = re.compile(r"^NPS[1-8]$")
NVIDIA_COMPUTE_MODES = frozenset({"none", "mig"})
_VERSION = re.compile(r"^[0-9][0-9A-Za-z._+-]{0,62}$")
# modpost writes srcversion as the upper-case hex of an MD4 digest cut to 23 characters.
_SRC_VERSION = re.compile(r"^[0-9A-F]{1,32}$")


def _reject(gpu: GpuDevice, source: str, value: str, what: str) -> None:
    log.warning(
        "ignoring GPU fact: %s reads %r, which is not %s",
        source,
        value,
        what,
        extra={"gpu": gpu.pci_address, "file": source, "value": value},
    )


def _compute_ok(gpu: GpuDevice, mode: str) -> bool:
    known = AMD_COMPUTE_MODES if gpu.vendor == Vendor.AMD else NVIDIA_COMPUTE_MODES
    if mode in known:
        return True
    amd = gpu.vendor == Vendor.AMD
    source = _source(gpu, "current_compute_partition") if amd else "nvmlDeviceGetMigMode"
    _reject(gpu, source, mode, "a compute partition mode")
    return False


def _memory_ok(gpu: GpuDevice, mode: str) -> bool:
    if AMD_MEMORY_MODE.match(mode):
        return True
    _reject(gpu, _source(gpu, "current_memory_partition"), mode, "a memory partition mode")
    return False


def _version_ok(gpu: GpuDevice, version: str) -> bool:
    if _VERSION.match(version):
        return True
    source = "/sys/module/amdgpu/version" if gpu.vendor == Vendor.AMD else "nvmlSystemGetDriverVersion"
    _reject(gpu, source, version, "a driver version")
    return False


def _src_version_ok(gpu: GpuDevice, value: str) -> bool:
    if _SRC_VERSION.match(value):
        return True
    _reject(gpu, "/sys/module/amdgpu/srcversion", value, "a module srcversion")
    return False


def _source(gpu: GpuDevice, name: str) -> str:
    return f"/sys/bus/pci/devices/{gpu.pci_address}/{name}"


def checked(gpu: GpuDevice) -> GpuDevice:
    """The GPU with garbage text facts replaced by None (each logged once, naming its file)."""
    state = gpu.partition
    if state is not None:
        compute = state.compute if state.compute is None or _compute_ok(gpu, state.compute) else None
        memory = state.memory if state.memory is None or _memory_ok(gpu, state.memory) else None
        if (compute, memory) != (state.compute, state.memory):
            state = dataclasses.replace(state, compute=compute, memory=memory)
    version = gpu.driver_version
    if version is not None and not _version_ok(gpu, version):
        version = None
    src_version = gpu.driver_src_version
    if src_version is not None and not _src_version_ok(gpu, src_version):
        src_version = None
    if (state, version, src_version) == (gpu.partition, gpu.driver_version, gpu.driver_src_version):
        return gpu
    return dataclasses.replace(gpu, partition=state, driver_version=version, driver_src_version=src_version)
