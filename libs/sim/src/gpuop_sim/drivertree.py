"""A simulated node's GPU driver tree, loaded (in place) or unloaded (kept aside under the root).

A node profile lays the full tree a loaded driver shows; `record()` then notes which paths belong to
the driver (module), and `unload()` / `load()` move exactly those paths out to
`<root>/.gpuop-sim/driver/<module>/` and back in, so after `modprobe amdgpu` the node shows the same
files `build_node_root` lays for that profile with a driver, and the PCI devices stay throughout.

- amdgpu: `/sys/class/kfd`, `/sys/class/drm`, `/sys/module/amdgpu`, `/dev/kfd`, `/dev/dri`, the
  `amdgpu_xcp_*` platform devices, and every attribute the driver adds to a GPU's PCI device
  directory (all but the generic PCI ones in `PCI_GENERIC`: vendor, device, class, ...).
- nvidia: `/dev/nvidia*`, `/dev/nvidia-caps`, `/proc/driver/nvidia*`, `/sys/module/nvidia*`, and the
  fake NVML's `driver_loaded` flag (NVML_ERROR_DRIVER_NOT_LOADED while false).

`inbox` marks a driver that ships with the node (profiles built with a driver): modprobe finds it
without a DKMS build and every boot loads it, as udev does for a module that matches the devices.

Stdlib only: the host-command fakes import it in a process per command.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from gpuop_sim.jsonfile import write_json_atomic

SIM_DIR = Path(".gpuop-sim")
TREES = SIM_DIR / "driver"
MODULES = ("amdgpu", "nvidia")
PCI_GENERIC = frozenset(
    {
        "vendor",
        "device",
        "subsystem_vendor",
        "subsystem_device",
        "revision",
        "class",
        "numa_node",
        "current_link_speed",
        "current_link_width",
        "max_link_speed",
        "max_link_width",
    }
)
_AMD_FIXED = ("sys/class/kfd", "sys/class/drm", "sys/module/amdgpu", "dev/kfd", "dev/dri")


def _manifest_path(root: Path, module: str) -> Path:
    return root / TREES / f"{module}.json"


def _aside(root: Path, module: str) -> Path:
    return root / TREES / module


def amd_driver_paths(root: Path, pci_addresses: list[str]) -> list[str]:
    """The root-relative paths the amdgpu driver contributes on this root."""
    paths = [p for p in _AMD_FIXED if (root / p).exists() or (root / p).is_symlink()]
    platform = root / "sys/devices/platform"
    if platform.is_dir():
        paths += sorted(str(p.relative_to(root)) for p in platform.glob("amdgpu_xcp_*"))
    for bdf in pci_addresses:
        device = (root / "sys/bus/pci/devices" / bdf).resolve()
        for entry in sorted(device.iterdir()) if device.is_dir() else []:
            if entry.name not in PCI_GENERIC:
                paths.append(str(entry.relative_to(root.resolve())))
    return paths


def nvidia_driver_paths(root: Path) -> list[str]:
    """The root-relative paths the NVIDIA kernel modules contribute on this root."""
    found = [*(root / "dev").glob("nvidia*"), *(root / "proc/driver").glob("nvidia*")]
    found += list((root / "sys/module").glob("nvidia*"))
    return sorted(str(p.relative_to(root)) for p in found)


def record(root: Path, module: str, paths: list[str], *, inbox: bool, nvml_state: str = "") -> None:
    """Note the driver's paths (laid and loaded now) for `load`/`unload`."""
    if module not in MODULES:
        raise ValueError(f"module must be one of {', '.join(MODULES)}, not {module!r}")
    data = {"paths": paths, "inbox": inbox, "nvml_state": nvml_state}
    _write_json(_manifest_path(root, module), data)


def _manifest(root: Path, module: str) -> dict[str, object] | None:
    path = _manifest_path(root, module)
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    return data if isinstance(data, dict) else None


def managed(root: Path, module: str) -> bool:
    """Whether this root has a profile tree for `module` (else the fakes' minimal layout applies)."""
    return _manifest(root, module) is not None


def inbox(root: Path, module: str) -> bool:
    data = _manifest(root, module)
    return bool(data and data.get("inbox"))


def is_loaded(root: Path, module: str) -> bool:
    aside = _aside(root, module)
    return managed(root, module) and not (aside.is_dir() and any(aside.iterdir()))


def _paths(root: Path, module: str) -> list[str]:
    data = _manifest(root, module) or {}
    paths = data.get("paths") or []
    return [str(p) for p in paths] if isinstance(paths, list) else []


def _move(source: Path, target: Path) -> None:
    if not (source.exists() or source.is_symlink()):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_dir() and not target.is_symlink():
        shutil.rmtree(target)
    elif target.exists() or target.is_symlink():
        target.unlink()
    os.rename(source, target)


def unload(root: Path, module: str) -> bool:
    """Move the driver's tree aside; False when the root has no recorded tree for `module`."""
    if not managed(root, module):
        return False
    for rel in _paths(root, module):
        _move(root / rel, _aside(root, module) / rel)
    _set_nvml_driver(root, module, loaded=False)
    return True


def load(root: Path, module: str) -> bool:
    """Move the driver's tree back in place; False when the root has no recorded tree."""
    if not managed(root, module):
        return False
    # Deepest paths last is not needed: recorded paths never nest (top-most entries only).
    for rel in _paths(root, module):
        _move(_aside(root, module) / rel, root / rel)
    _set_nvml_driver(root, module, loaded=True)
    return True


def _set_nvml_driver(root: Path, module: str, *, loaded: bool) -> None:
    data = _manifest(root, module) or {}
    state = str(data.get("nvml_state") or "")
    if not state or not (root / state).is_file():
        return
    values = json.loads((root / state).read_text())
    if values.get("driver_loaded", True) != loaded:
        values["driver_loaded"] = loaded
        _write_json(root / state, values)


def _write_json(path: Path, data: object) -> None:
    write_json_atomic(path, data)
