"""Lay an NVIDIA GPU node root: fake NVML state file, /dev/nvidia*, /proc/driver/nvidia, PCI sysfs."""

from __future__ import annotations

from pathlib import Path

from gpuop_sim.nodes.amd_root import write
from gpuop_sim.nodes.nvml_state import STATE_RELPATH, NvmlState, save_state

CAPS_PER_GPU_GI = 15  # GPU instance ids 0..14
CAPS_PER_GI_CI = 8  # compute instance ids 0..7


def mig_minors(gpu_minors: list[int]) -> dict[str, int]:
    """The `/proc/driver/nvidia-caps/mig-minors` table: config, monitor, then per GPU gi / gi+ci access."""
    table = {"config": 1, "monitor": 2}
    number = 3
    for gpu in gpu_minors:
        for gi in range(CAPS_PER_GPU_GI):
            table[f"gpu{gpu}/gi{gi}/access"] = number
            number += 1
            for ci in range(CAPS_PER_GI_CI):
                table[f"gpu{gpu}/gi{gi}/ci{ci}/access"] = number
                number += 1
    return table


def lay_nvidia(dest: Path, state: NvmlState) -> Path:
    state_path = dest / STATE_RELPATH
    save_state(state_path, state)
    write(
        dest / "proc/driver/nvidia/version",
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {state.driver_version}  "
        "Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)",
    )
    for node in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"):
        write(dest / "dev" / node, "")
    minors = mig_minors([gpu.minor_number for gpu in state.gpus])
    write(dest / "proc/driver/nvidia-caps/mig-minors", "\n".join(f"{k} {v}" for k, v in minors.items()))
    for gpu in state.gpus:
        write(dest / "dev" / f"nvidia{gpu.minor_number}", "")
        domain, bus, rest = gpu.bus_id.lower().split(":")
        bdf = f"{int(domain, 16):04x}:{bus}:{rest}"
        pci = dest / "sys/bus/pci/devices" / bdf
        attrs = {
            "vendor": f"0x{gpu.pci_device_id & 0xFFFF:04x}",
            "device": f"0x{gpu.pci_device_id >> 16:04x}",
            "subsystem_vendor": f"0x{gpu.pci_subsystem_id & 0xFFFF:04x}",
            "subsystem_device": f"0x{gpu.pci_subsystem_id >> 16:04x}",
            "class": "0x030200",
            "revision": "0xa1",
            "numa_node": str(gpu.numa_node),
            "current_link_speed": "32.0 GT/s PCIe",
            "current_link_width": "16",
            "max_link_speed": "32.0 GT/s PCIe",
            "max_link_width": "16",
        }
        for name, value in attrs.items():
            write(pci / name, value)
        for mig in gpu.mig_devices:
            for key in (
                f"gpu{gpu.minor_number}/gi{mig.gpu_instance_id}/access",
                f"gpu{gpu.minor_number}/gi{mig.gpu_instance_id}/ci{mig.compute_instance_id}/access",
            ):
                write(dest / "dev/nvidia-caps" / f"nvidia-cap{minors[key]}", "")
    return state_path
