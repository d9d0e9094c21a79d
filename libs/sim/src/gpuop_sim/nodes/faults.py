"""Fault helpers for tests and the simulator: edit a node root the way broken hardware would.

All helpers work on a root laid by `build_node_root`; AMD faults edit sysfs files, NVIDIA faults edit
the fake NVML state file (seen by every process using that node's fake NVML).

The GPU-breaking ones (`raise_ras`, `vanish_gpu`, `inject_xid`, or `break_gpu` naming the kind) are
recorded in the root's fault record (`gpuop_sim.faultstate`): the fake `amd-smi reset` /
`nvidia-smi -r` undo a GPU's faults unless one was made with `needs_reboot=True`, the fake `reboot`
undoes them all.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuop_common.gpu.amd_topology import KFD_TOPOLOGY, read_topology
from gpuop_common.gpu.sysfs import parse_properties

from gpuop_sim import faultstate
from gpuop_sim.nodes.nvml_state import STATE_RELPATH, GpuState, NvmlState, XidEvent, load_state, save_state

STASH = Path(".gpuop-sim-stash")
_HWMON_LABELS = {"edge": "edge", "junction": "junction", "hotspot": "junction", "memory": "mem", "mem": "mem"}


class FaultError(LookupError):
    """The fault target (GPU, file, sensor) does not exist in this node root."""


def set_garbage(root: Path, relpath: str, content: str = "\x00garbage\xff") -> Path:
    path = root / relpath
    if not path.exists():
        raise FaultError(f"{path} does not exist")
    path.write_bytes(content.encode("utf-8", errors="surrogateescape"))
    return path


def remove_file(root: Path, relpath: str) -> Path:
    path = root / relpath
    if not path.exists():
        raise FaultError(f"{path} does not exist")
    path.unlink()
    return path


def amd_device_dir(root: Path, pci_address: str) -> Path:
    link = root / "sys/bus/pci/devices" / pci_address
    if not link.exists():
        raise FaultError(f"no PCI device {pci_address} under {root}")
    return link.resolve()


def update_nvml_state(root: Path, change: Callable[[NvmlState], None]) -> NvmlState:
    path = root / STATE_RELPATH
    if not path.exists():
        raise FaultError(f"{root} has no fake NVML state")
    state = load_state(path)
    change(state)
    save_state(path, state)
    return state


def _nvidia_gpu(state: NvmlState, gpu: str) -> GpuState:
    for index, entry in enumerate(state.gpus):
        if gpu in (entry.uuid, _nvidia_pci(entry), str(index)):
            return entry
    raise FaultError(f"no NVIDIA GPU {gpu!r}")


def _nvidia_pci(entry: GpuState) -> str:
    """NVML's `00000000:18:00.0` as the kernel names it: `0000:18:00.0`."""
    return f"0000:{entry.bus_id.split(':', 1)[1]}".lower()


@dataclass
class VanishedGpu:
    """Files moved out of sight by `vanish_gpu`; `restore()` puts them back."""

    root: Path
    moved: list[tuple[Path, Path]] = field(default_factory=list)
    nvidia_uuid: str | None = None
    fault_id: str = ""

    def restore(self) -> None:
        for original, stashed in reversed(self.moved):
            if stashed.exists() or stashed.is_symlink():  # not already put back by a reset or reboot
                original.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(stashed, original)
        self.moved.clear()
        if self.nvidia_uuid is not None:
            wanted = self.nvidia_uuid
            update_nvml_state(self.root, lambda s: setattr(_nvidia_gpu(s, wanted), "lost", False))
        faultstate.forget(self.root, self.fault_id)

    def _record(self, gpu: str, needs_reboot: bool) -> None:
        fault = faultstate.Fault(
            kind="vanished",
            gpu=gpu,
            needs_reboot=needs_reboot,
            detail="GPU vanished",
            moved=[(str(o.relative_to(self.root)), str(s.relative_to(self.root))) for o, s in self.moved],
            nvidia_uuid=self.nvidia_uuid or "",
        )
        self.fault_id = faultstate.record(self.root, fault).id


def _stash(vanished: VanishedGpu, path: Path) -> None:
    if not path.exists() and not path.is_symlink():
        return
    target = vanished.root / STASH / uuid.uuid4().hex
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(path, target)
    vanished.moved.append((path, target))


def vanish_gpu(root: Path, gpu: str, *, needs_reboot: bool = False) -> VanishedGpu:
    """AMD (gpu = PCI address): remove its KFD nodes, DRM card/render entries and /dev nodes.
    NVIDIA (gpu = UUID, PCI address or index): NVML answers GPU_IS_LOST and /dev/nvidiaN is gone."""
    vanished = VanishedGpu(root)
    if (root / STATE_RELPATH).exists():
        state = load_state(root / STATE_RELPATH)
        target = _nvidia_gpu(state, gpu)
        update_nvml_state(root, lambda s: setattr(_nvidia_gpu(s, target.uuid), "lost", True))
        vanished.nvidia_uuid = target.uuid
        _stash(vanished, root / "dev" / f"nvidia{target.minor_number}")
        vanished._record(_nvidia_pci(target), needs_reboot)
        return vanished
    device_dir = amd_device_dir(root, gpu)
    nodes = [n for n in read_topology(root) if n.is_gpu and n.parent_bdf == gpu]
    minors = {n.render_minor for n in nodes if n.render_minor}
    if not nodes and not device_dir.exists():
        raise FaultError(f"no AMD GPU {gpu}")
    for node in nodes:
        _stash(vanished, node.path)
    drm = root / "sys/class/drm"
    for entry in sorted(drm.iterdir()) if drm.is_dir() else []:
        number = entry.name.removeprefix("renderD").removeprefix("card")
        render = int(number) + (0 if entry.name.startswith("renderD") else 128) if number.isdigit() else -1
        points_here = (entry / "device").resolve() == device_dir
        if points_here or render in minors:
            _stash(vanished, entry)
            _stash(vanished, root / "dev/dri" / entry.name)
    _stash(vanished, root / "sys/bus/pci/devices" / gpu)
    vanished._record(gpu.lower(), needs_reboot)
    return vanished


def raise_ras(
    root: Path, pci_address: str, block: str = "umc", by: int = 1, *, needs_reboot: bool = False
) -> int:
    """Add `by` uncorrectable errors to `ras/<block>_err_count`; returns the new count."""
    path = amd_device_dir(root, pci_address) / "ras" / f"{block}_err_count"
    if not path.exists():
        raise FaultError(f"{path} does not exist")
    counts = dict(line.split(": ") for line in path.read_text().splitlines() if ": " in line)
    counts["ue"] = str(int(counts.get("ue", "0")) + by)
    path.write_text("".join(f"{key}: {value}\n" for key, value in counts.items()))
    # The record names the file through the PCI link, as the reset fake and the playbook find it.
    relpath = f"sys/bus/pci/devices/{pci_address.lower()}/ras/{block}_err_count"
    fault = faultstate.Fault(
        "ras",
        pci_address.lower(),
        needs_reboot,
        f"RAS block {block} +{by} uncorrectable",
        ras_files=[relpath],
    )
    faultstate.record(root, fault)
    return int(counts["ue"])


def set_kfd_property(root: Path, node_index: int, key: str, value: int) -> None:
    path = root / KFD_TOPOLOGY / "nodes" / str(node_index) / "properties"
    props = parse_properties(path.read_text())
    if key not in props:
        raise FaultError(f"{path} has no key {key!r}")
    props[key] = value
    path.write_text("".join(f"{k} {v}\n" for k, v in props.items()))
    # The kernel rebuilds the topology (and bumps generation_id) whenever node properties change.
    generation = root / KFD_TOPOLOGY / "generation_id"
    if generation.exists():
        generation.write_text(f"{int(generation.read_text().strip() or 0) + 1}\n")


def inject_xid(
    root: Path,
    gpu: str,
    xid: int,
    *,
    gpu_instance_id: int | None = None,
    compute_instance_id: int | None = None,
    needs_reboot: bool = False,
) -> XidEvent:
    """Queue an XID critical-error event for the GPU (UUID, PCI address or index); until a reset (or
    for `needs_reboot`, a reboot) the fake `nvidia-smi` reports `reset_status.reset_required` Yes."""
    created: list[XidEvent] = []
    pci: list[str] = []

    def add(state: NvmlState) -> None:
        target = _nvidia_gpu(state, gpu)
        event = XidEvent(
            seq=max((e.seq for e in state.events), default=0) + 1,
            uuid=target.uuid,
            xid=xid,
            gpu_instance_id=0xFFFFFFFF if gpu_instance_id is None else gpu_instance_id,
            compute_instance_id=0xFFFFFFFF if compute_instance_id is None else compute_instance_id,
        )
        state.events.append(event)
        created.append(event)
        pci.append(_nvidia_pci(target))

    update_nvml_state(root, add)
    faultstate.record(root, faultstate.Fault("xid", pci[0], needs_reboot, f"XID {xid}"))
    return created[0]


BREAK_KINDS = faultstate.KINDS


def break_gpu(root: Path, gpu: str, kind: str = "ras", *, needs_reboot: bool = False) -> faultstate.Fault:
    """Make one GPU (PCI address; NVIDIA also UUID or index) unhealthy the way `kind` says:
    `ras` (AMD: +1 uncorrectable umc error), `vanished` (its KFD/DRM nodes or NVML device gone),
    `xid` (NVIDIA: critical XID 79). Returns the recorded fault."""
    if kind == "ras":
        raise_ras(root, gpu, needs_reboot=needs_reboot)
    elif kind == "vanished":
        vanish_gpu(root, gpu, needs_reboot=needs_reboot)
    elif kind == "xid":
        inject_xid(root, gpu, 79, needs_reboot=needs_reboot)
    else:
        raise FaultError(f"fault kind {kind!r}: expected one of {', '.join(BREAK_KINDS)}")
    return faultstate.load(root)[-1]


def active_faults(root: Path) -> list[faultstate.Fault]:
    """The GPU faults not yet undone by a reset or a reboot."""
    return faultstate.active(root)


def set_temperature(root: Path, gpu: str, celsius: float, sensor: str = "junction") -> None:
    """AMD: hwmon channel with that label (edge/junction/mem); NVIDIA: the GPU (or memory) temperature."""
    if (root / STATE_RELPATH).exists():

        def change(state: NvmlState) -> None:
            entry = _nvidia_gpu(state, gpu)
            if sensor in ("memory", "mem"):
                entry.memory_temperature_c = round(celsius)
            else:
                entry.temperature_c = round(celsius)

        update_nvml_state(root, change)
        return
    label = _HWMON_LABELS.get(sensor)
    for label_file in sorted(amd_device_dir(root, gpu).glob("hwmon/hwmon*/temp*_label")):
        if label_file.read_text().strip() == label:
            label_file.with_name(label_file.name.replace("_label", "_input")).write_text(
                f"{round(celsius * 1000)}\n"
            )
            return
    raise FaultError(f"GPU {gpu} has no {sensor} temperature sensor")
