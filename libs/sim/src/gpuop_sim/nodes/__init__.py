"""Simulated GPU node roots (AMD sysfs/KFD trees, NVIDIA fake-NVML state) and fault helpers.

info = build_node_root("amd-mi300x-cpx", tmp_path / "node-a")
backend = AmdSysfsBackend(info.root)
"""

from gpuop_sim.nodes.amd_driver import OpenDevice, hold_open
from gpuop_sim.nodes.faults import (
    FaultError,
    VanishedGpu,
    active_faults,
    break_gpu,
    inject_xid,
    raise_ras,
    remove_file,
    set_garbage,
    set_kfd_property,
    set_temperature,
    update_nvml_state,
    vanish_gpu,
)
from gpuop_sim.nodes.profiles import (
    FAKE_NVML_MODULE,
    PROFILES,
    NodeProfile,
    NodeRootInfo,
    UnknownProfileError,
    build_node_root,
)

__all__ = [
    "FAKE_NVML_MODULE",
    "PROFILES",
    "FaultError",
    "NodeProfile",
    "NodeRootInfo",
    "OpenDevice",
    "UnknownProfileError",
    "VanishedGpu",
    "active_faults",
    "break_gpu",
    "build_node_root",
    "hold_open",
    "inject_xid",
    "raise_ras",
    "remove_file",
    "set_garbage",
    "set_kfd_property",
    "set_temperature",
    "update_nvml_state",
    "vanish_gpu",
]
