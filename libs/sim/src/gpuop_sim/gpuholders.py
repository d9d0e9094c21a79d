"""Which processes hold a simulated node's GPU open, as the driver's open-file count knows.

A real `nvidia-smi -r`, `amd-smi reset` or partition change is refused while any other process has
the GPU open (NVML, `/dev/nvidia*`, `/dev/dri/*`, `/dev/kfd`); the node labeller, exporter, device
plugin, DRA driver and test runner all do while they run. Here each such process registers itself
under `<root>/.gpuop-sim/holders/<pci>/<pid>` (the fake NVML does it in `nvmlInit` for every GPU,
until `nvmlShutdown`; a workload that opens device nodes calls `hold`), and a holder counts for as
long as its process lives: one that exited without releasing is forgotten, as the kernel closes a
dead process's files. Any uid registers: the device files are world-openable on a real node (the
NVIDIA driver's default `NVreg_DeviceFileMode=0666`), so the driver counts an unprivileged agent's
open like root's; the folders here are writable by every uid (`prepare`, when the node root is laid,
then whichever agent makes a GPU's folder first). The device nodes the simulated amdgpu driver sees
open (`gpuop_sim.nodes.amd_driver.hold_open`: `/dev/kfd`, which reaches every GPU, or a GPU's own
`/dev/dri/renderD*`) hold the GPU as well.

Stdlib only: the host-command fakes import it in a process per command.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuop_sim import drivertree

HOLDERS = drivertree.SIM_DIR / "holders"
OPEN_DEVICES = drivertree.SIM_DIR / "open"  # = gpuop_sim.nodes.amd_driver.OPEN_DIR (one file per open)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() or "?"
    except OSError:
        return "?"


def prepare(root: Path) -> None:
    """The node's holder registry, open to every uid (done once when its root is laid)."""
    _shared_folder(root / HOLDERS)


def hold(root: Path, pci: str, pid: int | None = None) -> None:
    """Process `pid` (default: this one) opened the GPU at PCI address `pci`."""
    pid = os.getpid() if pid is None else pid
    folder = root / HOLDERS / pci.lower()
    for shared in (folder.parent, folder):
        _shared_folder(shared)
    (folder / str(pid)).write_text(_name(pid))


def _shared_folder(folder: Path) -> None:
    """Make `folder` writable by every uid (a root agent and a uid-65532 one hold the same GPU).

    Made under a temporary name and renamed into place, so no agent ever sees it before its mode
    is set (mkdir's mode is cut by the umask)."""
    if folder.is_dir():
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    made = folder.with_name(f".{folder.name}.{os.getpid()}")
    made.mkdir(exist_ok=True)
    made.chmod(0o777)
    try:
        made.rename(folder)
    except OSError:  # another agent made it first
        made.rmdir()


def release(root: Path, pci: str, pid: int | None = None) -> None:
    pid = os.getpid() if pid is None else pid
    (root / HOLDERS / pci.lower() / str(pid)).unlink(missing_ok=True)


def _open_device_nodes(root: Path, pci: str) -> list[str]:
    """The device nodes of this GPU held open through the simulated amdgpu driver."""
    folder = root / OPEN_DEVICES
    if not folder.is_dir():
        return []
    device = (root / "sys/bus/pci/devices" / pci.lower()).resolve()
    found = []
    for marker in sorted(folder.iterdir()):
        node = marker.read_text().strip() if marker.is_file() else ""
        if node == "/dev/kfd":
            found.append(node)
        elif node.startswith("/dev/dri/"):
            link = root / "sys/class/drm" / node.rsplit("/", 1)[-1] / "device"
            if link.exists() and link.resolve() == device:
                found.append(node)
    return found


def holders(root: Path, pci: str) -> list[str]:
    """`name (pid N)` of every live process other than this one holding the GPU, by pid, then
    `a process with <device> open` for each device node held open through the simulated driver."""
    folder = root / HOLDERS / pci.lower()
    found: list[tuple[int, str]] = []
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == os.getpid():
            continue
        if not _alive(pid):
            entry.unlink(missing_ok=True)
            continue
        found.append((pid, entry.read_text().strip() or "?"))
    opened = [f"a process with {node} open" for node in _open_device_nodes(root, pci)]
    return [f"{name} (pid {pid})" for pid, name in sorted(found)] + opened


def nvml_pci(bus_id: str) -> str:
    """NVML's `00000000:18:00.0` -> the kernel's `0000:18:00.0`."""
    domain, _, rest = bus_id.strip().lower().partition(":")
    return f"{domain[-4:]}:{rest}"
