"""Simulated GPU node roots: `build_node_root(profile, dest)` lays a complete host root under dest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gpuop_common.gpu.models import Vendor

from gpuop_sim import drivertree, gpuholders
from gpuop_sim.nodes import amd_driver, boards, kfd_gen
from gpuop_sim.nodes.amd_root import AmdBoard, AmdLayout, lay_amd_drm
from gpuop_sim.nodes.captures import extract
from gpuop_sim.nodes.fake_nvml import STATE_ENV
from gpuop_sim.nodes.nvidia_root import lay_nvidia

NVML_MODULE_ENV = "GPUOP_NVML_MODULE"
FAKE_NVML_MODULE = "gpuop_sim.nodes.fake_nvml"
HOST_ROOT_ENV = "GPUOP_HOST_ROOT"
SYSFS_WRITER_ENV = "GPUOP_SYSFS_WRITER"


@dataclass(frozen=True)
class NodeRootInfo:
    """What a simulated node root holds and how a process must be started to see it."""

    profile: str
    root: Path
    vendor: Vendor | None
    gpu_count: int
    partition_count: int = 0  # AMD compute partitions / NVIDIA MIG devices
    pci_addresses: tuple[str, ...] = ()
    nvml_state_path: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    driver_loaded: bool = True  # False: the PCI devices only; `modprobe` (hostfakes) loads it


@dataclass(frozen=True)
class NodeProfile:
    name: str
    vendor: Vendor | None
    description: str
    build: Callable[[Path, str, bool], NodeRootInfo]


def _env(root: Path, state: Path | None) -> dict[str, str]:
    # Every simulated node uses the fake NVML; without a state file it answers "library not found",
    # which is what a node without the NVIDIA driver looks like.
    return {
        NVML_MODULE_ENV: FAKE_NVML_MODULE,
        STATE_ENV: str(state) if state else "",
        HOST_ROOT_ENV: str(root),
        # Partition writes go to the simulated amdgpu driver (a plain file write where it has no say).
        SYSFS_WRITER_ENV: amd_driver.WRITER_SPEC,
    }


def _amd(name: str, kfd: Callable[[Path], object], board: AmdBoard, *, driver: bool = False) -> NodeProfile:
    def build(dest: Path, node: str, driver_loaded: bool) -> NodeRootInfo:
        kfd(dest)
        layout: AmdLayout = lay_amd_drm(dest, board)
        if driver:
            amd_driver.install(dest)
        paths = drivertree.amd_driver_paths(dest, layout.gpus)
        drivertree.record(dest, "amdgpu", paths, inbox=driver_loaded)
        if not driver_loaded:
            drivertree.unload(dest, "amdgpu")
        return NodeRootInfo(
            profile=name,
            root=dest,
            vendor=Vendor.AMD,
            gpu_count=len(layout.gpus),
            partition_count=layout.partitions,
            pci_addresses=tuple(layout.gpus),
            env=_env(dest, None),
            driver_loaded=driver_loaded,
        )

    return NodeProfile(name, Vendor.AMD, "", build)


def _capture(capture: str) -> Callable[[Path], object]:
    return lambda dest: extract(capture, dest)


def _nvidia(name: str, mig: dict[int, list[str]] | None) -> NodeProfile:
    def build(dest: Path, node: str, driver_loaded: bool) -> NodeRootInfo:
        state = boards.h100x8_state(node, mig)
        path = lay_nvidia(dest, state)
        paths = drivertree.nvidia_driver_paths(dest)
        nvml = str(path.relative_to(dest))
        drivertree.record(dest, "nvidia", paths, inbox=driver_loaded, nvml_state=nvml)
        if not driver_loaded:
            drivertree.unload(dest, "nvidia")
        return NodeRootInfo(
            profile=name,
            root=dest,
            vendor=Vendor.NVIDIA,
            gpu_count=len(state.gpus),
            partition_count=sum(len(g.mig_devices) for g in state.gpus),
            pci_addresses=tuple(f"0000:{g.bus_id.split(':', 1)[1]}".lower() for g in state.gpus),
            nvml_state_path=path,
            env=_env(dest, path),
            driver_loaded=driver_loaded,
        )

    return NodeProfile(name, Vendor.NVIDIA, "", build)


def _cpu_only(dest: Path, node: str, driver_loaded: bool) -> NodeRootInfo:
    for sub in ("sys/class/drm", "sys/bus/pci/devices", "proc/driver", "dev"):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    return NodeRootInfo(profile="cpu-only", root=dest, vendor=None, gpu_count=0, env=_env(dest, None))


MIG_LAYOUT = {0: ["1g.10gb"] * 7, 1: ["3g.40gb", "3g.40gb"], 2: ["3g.40gb", "2g.20gb", "1g.10gb"]}

_DESCRIPTIONS = {
    "amd-mi210x8": "8x MI210, two XGMI hives of 4 (real KFD capture mi210-8gpu-xgmi-pcie)",
    "amd-mi300x-cpx": "8x MI300X in CPX/NPS4 (real capture mi300x-8gpu-cpx: 63 partitions, last GPU has 7)",
    "amd-mi300x-spx": "8x MI300X in SPX/NPS1 (project-built from the CPX capture)",
    "amd-single": "1x MI25 (real capture single-gpu-plus-copy; its KFD node 2 duplicates node 1)",
    "amd-radeon": "1x Radeon PRO W7900 workstation GPU (project-written)",
    "nvidia-h100x8": "8x H100 80GB HBM3 over NVSwitch NVLink, MIG off (fake NVML)",
    "nvidia-h100x8-mig": "8x H100 80GB HBM3, MIG on GPUs 0-2: 7x1g.10gb, 2x3g.40gb, 3g.40gb+2g.20gb+1g.10gb",
    "cpu-only": "no GPU",
}

_PROFILES = [
    _amd("amd-mi210x8", _capture("mi210-8gpu-xgmi-pcie"), boards.MI210),
    _amd("amd-mi300x-cpx", _capture("mi300x-8gpu-cpx"), boards.MI300X_CPX, driver=True),
    _amd("amd-mi300x-spx", kfd_gen.mi300x_spx, boards.MI300X_SPX, driver=True),
    _amd("amd-single", _capture("single-gpu-plus-copy"), boards.MI25),
    _amd("amd-radeon", kfd_gen.radeon_w7900, boards.W7900),
    _nvidia("nvidia-h100x8", None),
    _nvidia("nvidia-h100x8-mig", MIG_LAYOUT),
    NodeProfile("cpu-only", None, "", _cpu_only),
]

PROFILES: dict[str, NodeProfile] = {
    p.name: NodeProfile(p.name, p.vendor, _DESCRIPTIONS[p.name], p.build) for p in _PROFILES
}


class UnknownProfileError(KeyError):
    def __init__(self, profile: str) -> None:
        super().__init__(f"unknown node profile {profile!r} (known: {', '.join(PROFILES)})")


NO_DRIVER_OS = "ubuntu-24.04"  # the OS of nodes laid without a driver


def build_node_root(
    profile: str, dest: Path, node_name: str | None = None, *, driver_loaded: bool = True
) -> NodeRootInfo:
    """Lay the host root of `profile` under `dest` (created; must be empty or absent).

    `node_name` seeds the NVIDIA UUIDs so two simulated nodes of one profile differ.
    `driver_loaded=False` lays a node with its GPUs on the PCI bus but no driver yet: no KFD/DRM
    tree, `/sys/module/amdgpu`, `/dev/kfd`, render or `/dev/nvidia*` nodes, and an NVML that answers
    NVML_ERROR_DRIVER_NOT_LOADED; the full tree waits under `.gpuop-sim/driver/` for `modprobe`
    (`gpuop_sim.drivertree`), and the host has an OS for the driver playbooks (NO_DRIVER_OS, a
    kernel, containerd). With a driver, the driver counts as in-box: it survives reboots.
    """
    spec = PROFILES.get(profile)
    if spec is None:
        raise UnknownProfileError(profile)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise FileExistsError(f"node root {dest} is not empty")
    info = spec.build(dest, node_name or profile, driver_loaded)
    (dest / "dev" / "shm").mkdir(parents=True, exist_ok=True)  # every Linux host has it (MPS binds over it)
    gpuholders.prepare(dest)  # any uid's agent opens the GPUs, the first one included
    if not driver_loaded:
        # A node the operator installs the driver on runs the driver playbooks against this root:
        # it needs what a freshly provisioned host has (an OS, a kernel, containerd).
        from gpuop_sim.bare_host import lay_host_os

        lay_host_os(dest, NO_DRIVER_OS)
    return info
