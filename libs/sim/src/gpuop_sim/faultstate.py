"""The GPU faults active on a simulated node root, and what a GPU reset or a reboot does to them.

`gpuop_sim.nodes.faults` records each GPU-breaking fault it makes (RAS uncorrectable errors, a
vanished GPU, an NVML XID) in `<root>/.gpuop-sim/faults.json`, with what undoing it takes: the files it
moved out of sight, the NVML `lost` flag it set, the RAS counter files it raised. The host-command
fakes read the same file: `amd-smi reset -G` / `nvidia-smi -r` undo the faults of the GPU they reset
unless a fault is marked `needs_reboot` (a wedged GPU a function-level reset does not bring back), and
`reboot` (`hostfakes.boot`) undoes every fault, as a power cycle does.

RAS counters survive a GPU reset, as on amdgpu (they live in the driver, which a reset does not
reload): only a reboot (or a driver reload) puts them back to 0. A RAS fault a reset cannot clear
counts one more uncorrectable error at the reset (the bad memory fails again as the GPU
re-initialises): that, compared with the counts before the reset, is what the `gpu-reset`
playbook's re-check reads.

Stdlib only: the host-command fakes import it in a process per command.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpuop_sim import drivertree
from gpuop_sim.jsonfile import write_json_atomic

FAULTS = drivertree.SIM_DIR / "faults.json"
NVML_STATE = Path("var/lib/gpuop-sim/nvml.json")  # = nodes.nvml_state.STATE_RELPATH (pydantic there)
KINDS = ("ras", "vanished", "xid")


@dataclass
class Fault:
    """One active fault. Paths are relative to the node root, so a root can be copied or moved."""

    kind: str  # one of KINDS
    gpu: str  # PCI address, lower case, domain included (0000:03:00.0)
    needs_reboot: bool = False
    detail: str = ""  # for people: "RAS block umc +1", "XID 79", ...
    moved: list[tuple[str, str]] = field(default_factory=list)  # (original, stashed) of a vanished GPU
    nvidia_uuid: str = ""  # a vanished NVIDIA GPU: NVML answers GPU_IS_LOST for it until undone
    ras_files: list[str] = field(default_factory=list)  # RAS counter files it raised (a reboot zeroes)
    id: str = ""  # set by record()


def load(root: Path) -> list[Fault]:
    path = root / FAULTS
    if not path.is_file():
        return []
    faults = []
    for raw in json.loads(path.read_text()):
        raw["moved"] = [tuple(pair) for pair in raw.get("moved", [])]
        faults.append(Fault(**raw))
    return faults


def save(root: Path, faults: list[Fault]) -> None:
    path = root / FAULTS
    if not faults:  # no fault left: the root looks as it did before the first one
        path.unlink(missing_ok=True)
        return
    write_json_atomic(path, [asdict(f) for f in faults])


def record(root: Path, fault: Fault) -> Fault:
    if fault.kind not in KINDS:
        raise ValueError(f"fault kind {fault.kind!r}: expected one of {', '.join(KINDS)}")
    fault.id = fault.id or uuid.uuid4().hex
    save(root, [*load(root), fault])
    return fault


def forget(root: Path, fault_id: str) -> None:
    """Drop a fault from the record without undoing it (its helper undid it itself)."""
    faults = load(root)
    if any(f.id == fault_id for f in faults):
        save(root, [f for f in faults if f.id != fault_id])


def active(root: Path, gpu: str | None = None) -> list[Fault]:
    """Faults still in effect, of one GPU (PCI address) or of all."""
    return [f for f in load(root) if gpu is None or f.gpu == gpu.lower()]


def _set_nvml_lost(root: Path, uuid: str, lost: bool) -> None:
    path = root / NVML_STATE
    if not path.is_file():
        return
    state = json.loads(path.read_text())
    for gpu in state.get("gpus", []):
        if gpu.get("uuid") == uuid:
            gpu["lost"] = lost
    write_json_atomic(path, state)


def zero_ras(root: Path, relpath: str) -> None:
    """`ue: N` -> `ue: 0` in one `ras/<block>_err_count` file (other lines kept)."""
    path = root / relpath
    if not path.is_file():
        return
    lines = ["ue: 0" if line.startswith("ue:") else line for line in path.read_text().splitlines()]
    path.write_text("".join(f"{line}\n" for line in lines))


def bump_ras(root: Path, relpath: str, by: int = 1) -> None:
    """`ue: N` -> `ue: N+by` in one `ras/<block>_err_count` file (other lines kept)."""
    path = root / relpath
    if not path.is_file():
        return
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        key, _, value = line.partition(":")
        if key.strip() == "ue" and value.strip().isdigit():
            lines[i] = f"ue: {int(value) + by}"
    path.write_text("".join(f"{line}\n" for line in lines))


def undo(root: Path, fault: Fault, *, reboot: bool = False) -> None:
    for original, stashed in reversed(fault.moved):
        source, target = root / stashed, root / original
        if source.exists() or source.is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(source, target)
    if fault.nvidia_uuid:
        _set_nvml_lost(root, fault.nvidia_uuid, False)
    for relpath in fault.ras_files if reboot else ():
        zero_ras(root, relpath)


def clear(root: Path, gpu: str | None = None, *, reboot: bool = False) -> tuple[list[Fault], list[Fault]]:
    """Undo the faults of one GPU (a reset) or of all (gpu None); a reset leaves `needs_reboot`
    faults in place, a reboot clears everything. Returns (cleared, kept)."""
    cleared: list[Fault] = []
    kept: list[Fault] = []
    for fault in load(root):
        mine = gpu is None or fault.gpu == gpu.lower()
        if mine and (reboot or not fault.needs_reboot):
            undo(root, fault, reboot=reboot)
            cleared.append(fault)
        else:
            kept.append(fault)
    if cleared:
        save(root, kept)
    return cleared, kept
