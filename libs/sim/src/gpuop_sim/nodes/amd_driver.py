"""The simulated amdgpu driver's answer to a partition write: what the kernel's sysfs store does.

`write_attr` has the signature of `gpuop_common.gpu.sysfs_write.write_attr`; a simulated node's
environment names it in GPUOP_SYSFS_WRITER, so the AMD backend's one write path lands here. A write
of `current_compute_partition` / `current_memory_partition` under a root laid with a driver state
(MI300X profiles) is checked like the kernel does and then re-lays the GPUs:
- the value is not a mode, not in `available_*_partition`, or the compute/memory pair is refused
  (gpuop_common.gpu.amd_partition rules) -> OSError EINVAL, nothing changes;
- a device node of the GPU (its card/render nodes) or /dev/kfd is held open -> OSError EBUSY;
- else the attribute changes, the KFD topology is rebuilt with the GPU's new partition count, its
  `amdgpu_xcp_<n>` platform devices, DRM card/render entries and /dev/dri nodes follow, and
  `generation_id` is bumped once the new tree is in place (mi300x_layout swaps it in atomically).
Any other path is written as a plain file.

A memory-partition write is a request, as on the kernel (amdgpu-sysfs.md 3.1: "takes effect after
driver reload/reset"): it is checked the same way, then kept pending in the driver state while
`current_memory_partition` still shows the mode in force; the next load of the module (`modprobe
amdgpu` after `modprobe -r amdgpu`, or a boot: `apply_pending`, called by the host-command fakes)
puts it in force and bumps `generation_id`. Writing the mode in force again cancels the request.

Differences from the kernel (stated, not hidden): a memory write is refused with EINVAL when the
compute mode in force would not be accepted under it (the kernel picks a compute mode at reload),
and both writes fail with EBUSY while a device node is open. "Open" is modelled by
`hold_open(root, "/dev/dri/renderD128")`, which tests and the simulator call.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from gpuop_common.gpu import sysfs_write
from gpuop_common.gpu.amd_partition import (
    COMPUTE_ATTR,
    COMPUTE_MODES,
    MEMORY_ATTR,
    MEMORY_MODES,
    pair_refusal,
    partition_count,
)
from gpuop_common.gpu.amd_topology import KFD_TOPOLOGY
from gpuop_common.gpu.sysfs import parse_mode_list

from gpuop_sim.nodes import mi300x_layout

SIM_DIR = Path(".gpuop-sim")
DRIVER_STATE = SIM_DIR / "amd-driver.json"
OPEN_DIR = SIM_DIR / "open"  # also read by gpuop_sim.gpuholders (the host tools' "device busy")
WRITER_SPEC = "gpuop_sim.nodes.amd_driver:write_attr"
PCI_ROOT = Path("sys/devices/pci0000:00")


def install(root: Path, num_xcc: int = mi300x_layout.MI300X_XCC) -> None:
    """Mark a laid MI300X root as driven by this driver (done by build_node_root)."""
    path = root / DRIVER_STATE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"hardware": mi300x_layout.CAPTURE, "num_xcc": num_xcc}) + "\n")


def _driver_root(path: Path) -> Path | None:
    for parent in path.parents:
        if (parent / DRIVER_STATE).is_file():
            return parent
    return None


def apply_pending(root: Path) -> None:
    """At a load of amdgpu on `root`: the requested memory partitions come into force (no-op on
    a root without the simulated MI300X driver)."""
    if (root / DRIVER_STATE).is_file():
        SimAmdDriver(root).apply_pending()


def in_use(root: Path) -> bool:
    """Whether any amdgpu device node is held open (`modprobe -r amdgpu` then refuses)."""
    return bool(open_devices(root))


def write_attr(path: Path, value: str) -> None:
    path = Path(path)
    root = _driver_root(path) if path.name in (COMPUTE_ATTR, MEMORY_ATTR) else None
    if root is None:
        sysfs_write.write_attr(path, value)
        return
    SimAmdDriver(root).store(path, value)


# "open" device nodes -----------------------------------------------------------------------------
@dataclass
class OpenDevice:
    """A device node held open (by a simulated workload or a test) until `close()`."""

    marker: Path
    device: str

    def close(self) -> None:
        self.marker.unlink(missing_ok=True)

    def __enter__(self) -> OpenDevice:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hold_open(root: Path, device: str) -> OpenDevice:
    """Mark `device` (e.g. `/dev/kfd`, `/dev/dri/renderD128`) as open on this node root."""
    if not (root / device.lstrip("/")).exists():
        raise FileNotFoundError(f"no device node {device} under {root}")
    marker = root / OPEN_DIR / uuid.uuid4().hex
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text(device + "\n")
    return OpenDevice(marker, device)


def open_devices(root: Path) -> set[str]:
    folder = root / OPEN_DIR
    if not folder.is_dir():
        return set()
    return {p.read_text().strip() for p in folder.iterdir() if p.is_file()}


# the driver --------------------------------------------------------------------------------------
def _fail(code: int, path: Path) -> OSError:
    return OSError(code, os.strerror(code), str(path))


class SimAmdDriver:
    def __init__(self, root: Path) -> None:
        self.root = root
        state = json.loads((root / DRIVER_STATE).read_text())
        self.num_xcc = int(state["num_xcc"])
        self.gpus = mi300x_layout.hardware().gpus

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        lock = self.root / SIM_DIR / "amd-driver.lock"
        with lock.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _ddir(self, bdf: str) -> Path:
        return self.root / PCI_ROOT / bdf

    def _read(self, bdf: str, name: str) -> str:
        return (self._ddir(bdf) / name).read_text().strip().upper()

    def modes(self) -> list[str]:
        return [self._read(g.bdf, COMPUTE_ATTR) for g in self.gpus]

    def store(self, path: Path, value: str) -> None:
        bdf = path.resolve().parent.name
        position = next((n for n, g in enumerate(self.gpus) if g.bdf == bdf), None)
        if position is None:
            raise _fail(errno.ENODEV, path)
        wanted = value.strip().upper()
        with self._locked():
            compute = self._read(bdf, COMPUTE_ATTR)
            memory = self._read(bdf, MEMORY_ATTR)
            if path.name == COMPUTE_ATTR:
                available = parse_mode_list(self._read(bdf, "available_compute_partition"))
                if wanted not in COMPUTE_MODES or wanted not in available:
                    raise _fail(errno.EINVAL, path)
                new_compute, new_memory = wanted, memory
            else:
                available = parse_mode_list(self._read(bdf, "available_memory_partition"))
                if wanted not in MEMORY_MODES or wanted not in available:
                    raise _fail(errno.EINVAL, path)
                new_compute, new_memory = compute, wanted
            if pair_refusal(new_compute, new_memory, self.num_xcc) is not None:
                raise _fail(errno.EINVAL, path)
            if path.name == MEMORY_ATTR:
                self._request_memory(position, bdf, wanted, memory)
                return
            if new_compute == compute:
                return
            if self._busy(position):
                raise _fail(errno.EBUSY, path)
            modes = self.modes()
            modes[position] = new_compute
            mi300x_layout.write_topology(self.root, modes, self.num_xcc)
            # Every GPU, not only this one: a capture-laid GPU (the CPX capture's last GPU shows
            # 7 of its 8 partitions) gets its full set when the driver first rebuilds the topology.
            for gpu, mode in enumerate(modes):
                self._relay_drm(gpu, mode)
            # The attribute changes with the new topology in place, then the generation moves on:
            # a reader never pairs the new mode with the old KFD nodes for longer than a write.
            (self._ddir(bdf) / path.name).write_text(wanted + "\n")
            self._bump_generation()

    def _request_memory(self, position: int, bdf: str, wanted: str, memory: str) -> None:
        pending = self._pending()
        if pending.get(bdf, memory) == wanted:
            return
        if self._busy(position):
            raise _fail(errno.EBUSY, self._ddir(bdf) / MEMORY_ATTR)
        if wanted == memory:
            pending.pop(bdf, None)  # back to the mode in force: nothing left to switch
        else:
            pending[bdf] = wanted
        self._save_pending(pending)

    def pending_memory(self) -> dict[str, str]:
        """PCI address -> memory partition requested, for the GPUs with a switch pending."""
        return dict(self._pending())

    def apply_pending(self) -> None:
        """What the module's load does with the requested memory partitions: puts them in force.
        A memory-only change keeps the KFD nodes (this layout has no per-NPS memory banks): the
        attribute changes and the generation moves on."""
        with self._locked():
            pending = self._pending()
            if not pending:
                return
            for bdf, mode in pending.items():
                (self._ddir(bdf) / MEMORY_ATTR).write_text(mode + "\n")
            self._save_pending({})
            self._bump_generation()

    def _pending(self) -> dict[str, str]:
        state = json.loads((self.root / DRIVER_STATE).read_text())
        return {str(k): str(v) for k, v in (state.get("pending_memory") or {}).items()}

    def _save_pending(self, pending: dict[str, str]) -> None:
        path = self.root / DRIVER_STATE
        state = json.loads(path.read_text())
        state["pending_memory"] = pending
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(state) + "\n")
        os.replace(tmp, path)

    # layout --------------------------------------------------------------------------------------
    def _xcp_name(self, position: int, k: int) -> str:
        return f"amdgpu_xcp_{(self.num_xcc - 1) * position + k - 1}"

    def device_nodes(self, position: int, mode: str) -> set[str]:
        base = self.gpus[position].render_base
        nodes = {"/dev/kfd"}
        for k in range(partition_count(mode, self.num_xcc)):
            nodes |= {f"/dev/dri/renderD{base + k}", f"/dev/dri/card{base + k - 128}"}
        return nodes

    def _busy(self, position: int) -> bool:
        mode = self._read(self.gpus[position].bdf, COMPUTE_ATTR)
        return bool(open_devices(self.root) & self.device_nodes(position, mode))

    def _relay_drm(self, position: int, mode: str) -> None:
        base = self.gpus[position].render_base
        drm = self.root / "sys/class/drm"
        for k in range(1, self.num_xcc):
            render = base + k
            for name in (f"renderD{render}", f"card{render - 128}"):
                shutil.rmtree(drm / name, ignore_errors=True)
                (self.root / "dev/dri" / name).unlink(missing_ok=True)
            shutil.rmtree(
                self.root / "sys/devices/platform" / self._xcp_name(position, k), ignore_errors=True
            )
        for k in range(1, partition_count(mode, self.num_xcc)):
            name = self._xcp_name(position, k)
            platform = self.root / "sys/devices/platform" / name
            platform.mkdir(parents=True, exist_ok=True)
            (platform / "uevent").write_text("DRIVER=amdgpu_xcp_drv\n")
            render = base + k
            for node in (f"card{render - 128}", f"renderD{render}"):
                link = drm / node / "device"
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(f"../../../devices/platform/{name}")
                dev = self.root / "dev/dri" / node
                dev.parent.mkdir(parents=True, exist_ok=True)
                dev.write_text("")

    def _bump_generation(self) -> None:
        path = self.root / KFD_TOPOLOGY / "generation_id"
        current = path.read_text().strip() if path.exists() else "0"
        path.write_text(f"{int(current or 0) + 1}\n")
