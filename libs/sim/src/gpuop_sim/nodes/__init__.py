"""Simulated GPU node roots (AMD sysfs/KFD trees, NVIDIA fake-NVML state) and fault helpers.

info = build_node_root("amd-mi300x-cpx", tmp_path / "node-a")
backend = AmdSysfsBackend(info.root)

The names below load their module on first use (PEP 562): a host-command fake that needs only the
simulated amdgpu driver (`amd-smi set`) starts as a process per call, and the NVML state models
would add most of a second to each.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_NAMES_OF_MODULE = {
    "amd_driver": ("OpenDevice", "hold_open"),
    "profiles": (
        "FAKE_NVML_MODULE",
        "PROFILES",
        "NodeProfile",
        "NodeRootInfo",
        "UnknownProfileError",
        "build_node_root",
    ),
}
# Every other exported name is a fault helper.
_MODULE_OF = {name: module for module, names in _NAMES_OF_MODULE.items() for name in names}
_MODULE_OF |= {name: "faults" for name in __all__ if name not in _MODULE_OF}


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once loaded, an ordinary module attribute
    return value
