"""After the driver is loaded: does every PCI GPU of the vendor have its device nodes?

AMD: `/dev/kfd` plus, per GPU, a DRM render node whose sysfs `device` link is that PCI function.
NVIDIA: `/dev/nvidiactl` plus one `/dev/nvidia<N>` per GPU. The driver playbooks call this through
the `gpuop_gpu_devices` module; a node where the module loaded but a GPU has no node fails here
instead of later in the device plugin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from gpuop_common.gpu.amd_drm import AMD_VENDOR_ID
from gpuop_common.gpu.detect import NVIDIA_VENDOR_ID, pci_gpu_addresses

GpuVendor = Literal["amd", "nvidia"]
_NVIDIA_MINOR = re.compile(r"^nvidia(\d+)$")


@dataclass
class DeviceCheck:
    gpus: list[str] = field(default_factory=list)  # PCI addresses
    device_nodes: list[str] = field(default_factory=list)  # found, relative to the host root
    missing: list[str] = field(default_factory=list)  # what is absent, in words

    @property
    def ok(self) -> bool:
        return bool(self.gpus) and not self.missing

    @property
    def message(self) -> str:
        if not self.gpus:
            return "no GPU of this vendor under sys/bus/pci/devices"
        if self.missing:
            return f"driver loaded but device nodes are missing: {'; '.join(self.missing)}"
        return f"{len(self.gpus)} GPU(s), device nodes present"


def _amd(root: Path, check: DeviceCheck) -> None:
    if (root / "dev/kfd").exists():
        check.device_nodes.append("/dev/kfd")
    else:
        check.missing.append("/dev/kfd")
    render_of: dict[str, str] = {}
    drm = root / "sys/class/drm"
    for entry in sorted(drm.glob("renderD*")) if drm.is_dir() else []:
        device = entry / "device"
        if device.exists():
            render_of.setdefault(device.resolve().name, entry.name)
    for bdf in check.gpus:
        render = render_of.get(bdf)
        if render is None or not (root / "dev/dri" / render).exists():
            check.missing.append(f"render node for {bdf}")
        else:
            check.device_nodes.append(f"/dev/dri/{render}")


def _nvidia(root: Path, check: DeviceCheck) -> None:
    dev = root / "dev"
    if (dev / "nvidiactl").exists():
        check.device_nodes.append("/dev/nvidiactl")
    else:
        check.missing.append("/dev/nvidiactl")
    minors = sorted(
        f"/dev/{p.name}" for p in (dev.iterdir() if dev.is_dir() else []) if _NVIDIA_MINOR.match(p.name)
    )
    check.device_nodes.extend(minors)
    if len(minors) < len(check.gpus):
        check.missing.append(f"{len(check.gpus)} GPUs but {len(minors)} /dev/nvidia<N> node(s)")


def check_devices(root: Path | str, vendor: GpuVendor) -> DeviceCheck:
    host = Path(root)
    check = DeviceCheck(gpus=pci_gpu_addresses(host, AMD_VENDOR_ID if vendor == "amd" else NVIDIA_VENDOR_ID))
    (_amd if vendor == "amd" else _nvidia)(host, check)
    return check
