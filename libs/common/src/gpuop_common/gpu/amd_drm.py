"""DRM nodes of amdgpu devices (`/sys/class/drm/card*`, `renderD*`) and the PCI device dirs behind them.

`card<N>/device` links to the PCI function of a whole GPU, or to a platform device `amdgpu_xcp_<n>`
(some systems: `amdgpu_xcp.<n>`) for a compute partition; resolving the link tells them apart.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from gpuop_common.gpu.sysfs import list_dir, parse_hex, read_optional

log = logging.getLogger(__name__)

DRM_CLASS = Path("sys/class/drm")
PCI_DEVICES = Path("sys/bus/pci/devices")
AMD_VENDOR_ID = 0x1002
_BDF = re.compile(r"^[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_NODE = re.compile(r"^(card|renderD)(\d+)$")


@dataclass(slots=True)
class DrmDevice:
    """The DRM nodes of one target device (a PCI function or one XCP platform device)."""

    target: str  # BDF or xcp name
    device_dir: Path
    card_minor: int | None = None
    render_minor: int | None = None


@dataclass(slots=True)
class DrmInventory:
    pci: dict[str, DrmDevice] = field(default_factory=dict)
    xcp: dict[str, DrmDevice] = field(default_factory=dict)

    def xcp_for_render(self, render_minor: int) -> DrmDevice | None:
        return next((d for d in self.xcp.values() if d.render_minor == render_minor), None)


def _target_of(device_link: Path) -> str | None:
    try:
        resolved = device_link.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    name = resolved.name
    if _BDF.match(name) or name.startswith("amdgpu_xcp"):
        return name.lower() if _BDF.match(name) else name
    uevent = read_optional(resolved / "uevent", str)
    if uevent:
        for line in uevent.splitlines():
            if line.startswith("PCI_SLOT_NAME="):
                return line.split("=", 1)[1].strip().lower()
    return None


def scan_drm(root: Path) -> DrmInventory:
    """All amdgpu DRM nodes under the host root; NVIDIA (or other) cards are left out."""
    inventory = DrmInventory()
    drm_dir = root / DRM_CLASS
    for entry in list_dir(drm_dir):
        match = _NODE.match(entry.name)
        if match is None:
            continue
        target = _target_of(entry / "device")
        if target is None:
            log.debug("DRM node %s has no resolvable device", entry)
            continue
        device_dir = (entry / "device").resolve()
        is_xcp = target.startswith("amdgpu_xcp")
        if not is_xcp and read_optional(device_dir / "vendor", parse_hex) != AMD_VENDOR_ID:
            continue
        table = inventory.xcp if is_xcp else inventory.pci
        device = table.setdefault(target, DrmDevice(target=target, device_dir=device_dir))
        minor = int(match.group(2))
        if match.group(1) == "card":
            device.card_minor = minor if device.card_minor is None else min(device.card_minor, minor)
        else:
            device.render_minor = minor if device.render_minor is None else min(device.render_minor, minor)
    return inventory


def pci_device_dir(root: Path, bdf: str, drm: DrmInventory) -> Path | None:
    """The PCI attribute dir of a GPU: through its DRM card, else /sys/bus/pci/devices/<BDF>."""
    if bdf in drm.pci:
        return drm.pci[bdf].device_dir
    candidate = root / PCI_DEVICES / bdf
    return candidate if candidate.is_dir() else None
