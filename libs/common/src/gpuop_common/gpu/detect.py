"""Which GPU vendors a node has, decided from its host root alone, and the matching backends."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from gpuop_common.gpu.amd import AmdSysfsBackend
from gpuop_common.gpu.amd_drm import AMD_VENDOR_ID, DRM_CLASS, PCI_DEVICES
from gpuop_common.gpu.amd_topology import TopologyCache, read_topology
from gpuop_common.gpu.base import GpuBackend
from gpuop_common.gpu.errors import GpuBackendError
from gpuop_common.gpu.models import Vendor
from gpuop_common.gpu.nvidia import NvmlBackend
from gpuop_common.gpu.sysfs import list_dir, parse_hex, read_optional
from gpuop_common.gpu.sysfs_write import AttrWriter

log = logging.getLogger(__name__)

NVIDIA_VENDOR_ID = 0x10DE
NVIDIA_PROC_VERSION = Path("proc/driver/nvidia/version")
_DISPLAY_CLASS = 0x03  # PCI base class "display controller" (VGA 0x0300, 3D 0x0302)
_ACCELERATOR_CLASS = 0x12  # "processing accelerator" (MI300X reports 0x120000)

VendorChoice = Literal["auto", "amd", "nvidia"]


def _pci_gpu_dirs(root: Path, vendor_id: int) -> Iterator[Path]:
    for device in list_dir(root / PCI_DEVICES):
        if read_optional(device / "vendor", parse_hex) != vendor_id:
            continue
        klass = read_optional(device / "class", parse_hex)
        if klass is not None and (klass >> 16) in (_DISPLAY_CLASS, _ACCELERATOR_CLASS):
            yield device


def pci_gpu_addresses(root: Path | str, vendor_id: int) -> list[str]:
    """PCI addresses of the display/accelerator functions of `vendor_id`, driver loaded or not."""
    return sorted(device.name for device in _pci_gpu_dirs(Path(root), vendor_id))


def _pci_gpus(root: Path, vendor_id: int) -> bool:
    return any(True for _ in _pci_gpu_dirs(root, vendor_id))  # stops at the first match


def _amd_present(root: Path) -> bool:
    # Cheapest first: a DRM card or a PCI function is a few small reads, while the KFD topology
    # (every node's properties and links: ~900 files on an MI300X in CPX) is the last resort for
    # a root that has KFD but neither (some containers mount only /sys/class/kfd).
    drm = root / DRM_CLASS
    if drm.is_dir():
        for card in drm.glob("card*"):
            if read_optional(card / "device" / "vendor", parse_hex) == AMD_VENDOR_ID:
                return True
    if _pci_gpus(root, AMD_VENDOR_ID):
        return True
    return any(node.is_gpu for node in read_topology(root))


def _nvidia_present(root: Path) -> bool:
    return (root / NVIDIA_PROC_VERSION).is_file() or _pci_gpus(root, NVIDIA_VENDOR_ID)


def detect_vendors(host_root: Path | str = "/") -> list[Vendor]:
    """Vendors with GPUs on this node: AMD by KFD/DRM/PCI sysfs, NVIDIA by /proc/driver/nvidia or PCI."""
    root = Path(host_root)
    found: list[Vendor] = []
    if _amd_present(root):
        found.append(Vendor.AMD)
    if _nvidia_present(root):
        found.append(Vendor.NVIDIA)
    return found


def open_backends(
    host_root: Path | str = "/",
    vendor: VendorChoice | str = "auto",
    *,
    nvml: Any | None = None,
    topology: TopologyCache | None = None,
    amd_writer: AttrWriter | None = None,
) -> list[GpuBackend]:
    """Backends for the node. `auto` opens one per detected vendor and leaves out an NVIDIA backend
    whose driver is missing; naming a vendor always returns its backend (possibly `available=False`).
    `topology`: a KFD topology cache to share with backends opened before or after (it re-reads the
    topology only when the kernel rebuilt it). `amd_writer`: how AMD partition attributes are
    written (`amd_smi.AmdSmiWriter`); the sysfs files when None."""
    root = Path(host_root)
    choice = vendor.lower()
    if choice == "amd":
        return [AmdSysfsBackend(root, amd_writer, topology=topology)]
    if choice == "nvidia":
        return [NvmlBackend(nvml, root)]
    if choice != "auto":
        raise GpuBackendError(f"unknown GPU vendor {vendor!r} (allowed: auto, amd, nvidia)")
    backends: list[GpuBackend] = []
    for found in detect_vendors(root):
        if found == Vendor.AMD:
            backends.append(AmdSysfsBackend(root, amd_writer, topology=topology))
            continue
        nvidia = NvmlBackend(nvml, root)
        if nvidia.available:
            backends.append(nvidia)
        else:
            log.warning(
                "NVIDIA GPUs present under %s but no usable driver: %s", root, nvidia.unavailable_reason
            )
    return backends
