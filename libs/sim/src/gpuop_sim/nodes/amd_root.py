"""Lay an AMD GPU node root: real KFD topology + project-written amdgpu sysfs, hwmon, RAS and /dev.

The DRM side follows the KFD nodes (amdgpu-sysfs.md sections 1-7): each PCI GPU gets `card<N>` /
`renderD<M>` with M = the KFD `drm_render_minor` of its function-0 node and N = M - 128; each further
compute partition gets an `amdgpu_xcp_<n>` platform device with its own card/render pair.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gpuop_common.gpu.amd_topology import KfdNode, group_by_gpu, read_topology

PCI_ROOT = Path("sys/devices/pci0000:00")
# The amdgpu module's `srcversion` on every simulated host (23 upper-case hex digits, as modpost writes it).
AMDGPU_SRCVERSION = "F7C0D5B2A4B3E6D8C9A1B2C"


@dataclass(frozen=True)
class AmdBoard:
    """Per-board sysfs values (one board model for all GPUs of a profile, varied by index)."""

    subsystem_vendor: int
    subsystem_device: int
    revision: int
    pci_class: int
    vram_total: int
    vram_used: int
    vbios: str
    product_name: str | None
    serial_prefix: str | None
    link_speed: str
    link_width: int
    sclk_dpm: str
    mclk_dpm: str
    temps_milli_c: dict[str, int]  # hwmon label -> millidegree C (edge absent on MI300)
    power_average_uw: int | None
    power_input_uw: int | None
    power_cap_uw: int
    freq_sclk_hz: int
    freq_mclk_hz: int
    gpu_busy: int
    mem_busy: int
    pcie_bw: str | None
    fan_rpm: int | None = None
    ras_ue_ce: dict[str, tuple[int, int]] | None = None
    compute_partition: str | None = None
    available_compute: str | None = None
    memory_partition: str | None = None
    available_memory: str | None = None
    driver_version: str = "6.10.5"


@dataclass
class AmdLayout:
    """What was laid, for NodeRootInfo and the fault helpers."""

    gpus: list[str] = field(default_factory=list)  # PCI addresses, index order
    card_minors: dict[str, int] = field(default_factory=dict)
    partitions: int = 0


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n")


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.exists():
        path.unlink()
    path.symlink_to(target)


def _numa_of(node: KfdNode, cpu_nodes: list[int]) -> int:
    for link in node.io_links:
        if link.node_to in cpu_nodes:
            return cpu_nodes.index(link.node_to)
    return 0


def _device_attrs(ddir: Path, board: AmdBoard, index: int, node: KfdNode, numa: int) -> None:
    uid = node.prop("unique_id") or 0
    attrs = {
        "vendor": "0x1002",
        "device": f"0x{node.prop('device_id') or 0:04x}",
        "subsystem_vendor": f"0x{board.subsystem_vendor:04x}",
        "subsystem_device": f"0x{board.subsystem_device:04x}",
        "revision": f"0x{board.revision:02x}",
        "class": f"0x{board.pci_class:06x}",
        "numa_node": str(numa),
        "current_link_speed": board.link_speed,
        "max_link_speed": board.link_speed,
        "current_link_width": str(board.link_width),
        "max_link_width": str(board.link_width),
        "pcie_replay_count": "0",
        "unique_id": f"{uid:016x}",
        "vbios_version": board.vbios,
        "mem_info_vram_total": str(board.vram_total),
        "mem_info_vram_used": str(board.vram_used + index * 1048576),
        "mem_info_vis_vram_total": str(board.vram_total),
        "mem_info_vram_vendor": "hynix",
        "gpu_busy_percent": str((board.gpu_busy + index * 7) % 101),
        "mem_busy_percent": str((board.mem_busy + index * 3) % 101),
        "pp_dpm_sclk": board.sclk_dpm,
        "pp_dpm_mclk": board.mclk_dpm,
        "power_dpm_force_performance_level": "auto",
        "uevent": f"DRIVER=amdgpu\nPCI_SLOT_NAME={ddir.name}",
    }
    if board.pcie_bw is not None:
        attrs["pcie_bw"] = board.pcie_bw
    if board.product_name is not None:
        attrs["product_name"] = board.product_name
    if board.serial_prefix is not None:
        attrs["serial_number"] = f"{board.serial_prefix}{index:04d}"
    if board.compute_partition is not None and board.available_compute is not None:
        attrs["current_compute_partition"] = board.compute_partition
        attrs["available_compute_partition"] = board.available_compute
    if board.memory_partition is not None and board.available_memory is not None:
        attrs["current_memory_partition"] = board.memory_partition
        attrs["available_memory_partition"] = board.available_memory
    for name, value in attrs.items():
        write(ddir / name, value)
    write(ddir / "driver/module/version", board.driver_version)
    write(ddir / "driver/module/srcversion", AMDGPU_SRCVERSION)
    if board.ras_ue_ce is not None:
        write(ddir / "ras/features", "feature mask: 0x" + f"{(1 << len(board.ras_ue_ce)) - 1:x}")
        for block, (ue, ce) in board.ras_ue_ce.items():
            write(ddir / "ras" / f"{block}_err_count", f"ue: {ue}\nce: {ce}")
    _hwmon(ddir / "hwmon" / f"hwmon{index + 2}", board, index)


def _hwmon(hw: Path, board: AmdBoard, index: int) -> None:
    write(hw / "name", "amdgpu")
    channel = {"edge": 1, "junction": 2, "mem": 3}
    for label, milli in board.temps_milli_c.items():
        number = channel[label]
        write(hw / f"temp{number}_label", label)
        write(hw / f"temp{number}_input", str(milli + index * 1000))
        write(hw / f"temp{number}_crit", "105000")
    if board.power_average_uw is not None:
        write(hw / "power1_average", str(board.power_average_uw + index * 1_000_000))
    if board.power_input_uw is not None:
        write(hw / "power1_input", str(board.power_input_uw + index * 1_000_000))
    write(hw / "power1_cap", str(board.power_cap_uw))
    write(hw / "power1_cap_max", str(board.power_cap_uw))
    write(hw / "power1_label", "PPT")
    write(hw / "freq1_label", "sclk")
    write(hw / "freq1_input", str(board.freq_sclk_hz))
    write(hw / "freq2_label", "mclk")
    write(hw / "freq2_input", str(board.freq_mclk_hz))
    if board.fan_rpm is not None:
        write(hw / "fan1_input", str(board.fan_rpm))


def lay_amd_drm(dest: Path, board: AmdBoard) -> AmdLayout:
    """Write DRM/PCI/hwmon/dev files for every GPU found in the KFD topology already under dest."""
    nodes = read_topology(dest)
    cpu_nodes = [n.index for n in nodes if n.props.get("cpu_cores_count", 0) > 0 and not n.is_gpu]
    groups = group_by_gpu(nodes)
    layout = AmdLayout()
    xcp = 0
    for index, (bdf, members) in enumerate(sorted(groups.items())):
        primary = members[0]
        ddir = dest / PCI_ROOT / bdf
        _device_attrs(ddir, board, index, primary, _numa_of(primary, cpu_nodes))
        _link(dest / "sys/bus/pci/devices" / bdf, f"../../../devices/pci0000:00/{bdf}")
        _link(dest / "sys/module/amdgpu/drivers/pci:amdgpu" / bdf, f"../../../../devices/pci0000:00/{bdf}")
        layout.gpus.append(bdf)
        for member in members:
            render = member.render_minor or 128
            card = render - 128
            if member is primary:
                target = f"../../../devices/pci0000:00/{bdf}"
                layout.card_minors[bdf] = card
            else:
                name = f"amdgpu_xcp_{xcp}"
                xcp += 1
                write(dest / "sys/devices/platform" / name / "uevent", "DRIVER=amdgpu_xcp_drv")
                target = f"../../../devices/platform/{name}"
                layout.partitions += 1
            for node_name in (f"card{card}", f"renderD{render}"):
                _link(dest / "sys/class/drm" / node_name / "device", target)
                write(dest / "dev/dri" / node_name, "")
        if len(members) > 1:
            layout.partitions += 1
    write(dest / "sys/module/amdgpu/version", board.driver_version)
    write(dest / "sys/module/amdgpu/srcversion", AMDGPU_SRCVERSION)
    write(dest / "sys/module/amdgpu/initstate", "live")
    write(dest / "dev/kfd", "")
    return layout
