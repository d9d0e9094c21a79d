"""Project-built KFD topologies: the MI300X SPX view of the CPX capture, and a Radeon PRO W7900 node.

Not captures: derived with the rules of amdgpu-sysfs.md section 6 (SPX = one KFD node per GPU with
num_xcc 8 and the SIMDs of all XCCs; partitions of one GPU share domain/bus/dev).
"""

from __future__ import annotations

from pathlib import Path

from gpuop_common.gpu.amd_topology import KFD_TOPOLOGY, LINK_PCIE, LINK_XGMI
from gpuop_common.gpu.sysfs import parse_properties

from gpuop_sim.nodes.captures import capture_files

Props = dict[str, int]
SPX_XGMI_WEIGHT = 15  # project choice: same as the MI210 bridge weight seen in the capture
SPX_XGMI_BANDWIDTH = 64000  # MB/s per peer, project choice


def _render(props: Props) -> str:
    return "".join(f"{key} {value}\n" for key, value in props.items())


def write_node(
    kfd_dir: Path,
    index: int,
    props: Props,
    io_links: list[Props],
    *,
    mem_banks: list[Props] | None = None,
    gpu_id: int | None = None,
) -> None:
    node = kfd_dir / "nodes" / str(index)
    node.mkdir(parents=True, exist_ok=True)
    props = dict(props)
    props["io_links_count"] = len(io_links)
    props["p2p_links_count"] = 0
    if mem_banks is not None:
        props["mem_banks_count"] = len(mem_banks)
    (node / "properties").write_text(_render(props))
    for number, link in enumerate(io_links):
        link_dir = node / "io_links" / str(number)
        link_dir.mkdir(parents=True)
        (link_dir / "properties").write_text(_render(link))
    for number, bank in enumerate(mem_banks or []):
        bank_dir = node / "mem_banks" / str(number)
        bank_dir.mkdir(parents=True)
        (bank_dir / "properties").write_text(_render(bank))
    if gpu_id is not None:
        (node / "gpu_id").write_text(f"{gpu_id}\n")
        (node / "name").write_text("\n")


def _link(template: Props, node_from: int, node_to: int, **changes: int) -> Props:
    link = dict(template)
    link["node_from"], link["node_to"] = node_from, node_to
    link.update(changes)
    return link


def mi300x_spx(dest_root: Path) -> None:
    """One node per MI300X (the function-0 node of each CPX group), SIMDs and arrays times 8."""
    files = capture_files("mi300x-8gpu-cpx")
    props = {
        int(rel.split("/")[1]): parse_properties(text)
        for rel, text in files.items()
        if rel.endswith("/properties") and rel.count("/") == 2
    }
    links = {rel: parse_properties(text) for rel, text in files.items() if "/io_links/" in rel}
    cpus = sorted(i for i, p in props.items() if p.get("cpu_cores_count", 0) > 0)
    primaries = sorted(
        i for i, p in props.items() if p.get("simd_count", 0) > 0 and p["location_id"] & 7 == 0
    )
    new_index = {old: n for n, old in enumerate(cpus + primaries)}
    kfd_dir = dest_root / KFD_TOPOLOGY
    pcie_template = next(
        v for k, v in links.items() if k.startswith(f"nodes/{primaries[0]}/") and v["type"] == LINK_PCIE
    )
    xgmi_template = next(
        v for k, v in links.items() if k.startswith(f"nodes/{primaries[0]}/") and v["type"] == LINK_XGMI
    )
    for old in cpus:
        own = [v for k, v in links.items() if k.startswith(f"nodes/{old}/") and v["node_to"] in new_index]
        io = [_link(v, new_index[old], new_index[v["node_to"]]) for v in own]
        write_node(kfd_dir, new_index[old], props[old], io)
    for old in primaries:
        gpu = dict(props[old])
        xcc = 8
        gpu.update(simd_count=gpu["simd_count"] * xcc, array_count=gpu["array_count"] * xcc, num_xcc=xcc)
        gpu["caches_count"] = 0
        gpu["mem_banks_count"] = 0
        cpu_link = next(v for k, v in links.items() if k.startswith(f"nodes/{old}/") and v["node_to"] in cpus)
        io = [_link(pcie_template, new_index[old], new_index[cpu_link["node_to"]])]
        for peer in primaries:
            if peer != old:
                io.append(
                    _link(
                        xgmi_template,
                        new_index[old],
                        new_index[peer],
                        weight=SPX_XGMI_WEIGHT,
                        min_bandwidth=SPX_XGMI_BANDWIDTH,
                        max_bandwidth=SPX_XGMI_BANDWIDTH,
                    )
                )
        write_node(kfd_dir, new_index[old], gpu, io)
    (kfd_dir / "generation_id").write_text(files.get("generation_id", "1\n"))
    (kfd_dir / "system_properties").write_text(files.get("system_properties", ""))


W7900_VRAM = 48 * 1024**3


def radeon_w7900(dest_root: Path) -> None:
    """One CPU node and one Navi 31 Radeon PRO W7900 (gfx1100, 96 CUs, wave32, 48 GiB, bus 0x03)."""
    kfd_dir = dest_root / KFD_TOPOLOGY
    cpu: Props = {
        "cpu_cores_count": 32, "simd_count": 0, "mem_banks_count": 1, "caches_count": 0,
        "io_links_count": 1, "p2p_links_count": 0, "cpu_core_id_base": 0, "simd_id_base": 0,
        "max_waves_per_simd": 0, "lds_size_in_kb": 0, "gds_size_in_kb": 0, "num_gws": 0,
        "wave_front_size": 0, "array_count": 0, "simd_arrays_per_engine": 0, "cu_per_simd_array": 0,
        "simd_per_cu": 0, "max_slots_scratch_cu": 0, "gfx_target_version": 0, "vendor_id": 0,
        "device_id": 0, "location_id": 0, "domain": 0, "drm_render_minor": 0, "hive_id": 0,
        "num_sdma_engines": 0, "num_sdma_xgmi_engines": 0, "num_sdma_queues_per_engine": 0,
        "num_cp_queues": 0, "max_engine_clk_ccompute": 4200,
    }  # fmt: skip
    gpu: Props = {
        "cpu_cores_count": 0, "simd_count": 192, "mem_banks_count": 1, "caches_count": 0,
        "io_links_count": 1, "p2p_links_count": 0, "cpu_core_id_base": 0, "simd_id_base": 2147487744,
        "max_waves_per_simd": 16, "lds_size_in_kb": 64, "gds_size_in_kb": 0, "num_gws": 64,
        "wave_front_size": 32, "array_count": 12, "simd_arrays_per_engine": 2, "cu_per_simd_array": 8,
        "simd_per_cu": 2, "max_slots_scratch_cu": 32, "gfx_target_version": 110000, "vendor_id": 4098,
        "device_id": 0x7448, "location_id": 0x0300, "domain": 0, "drm_render_minor": 128, "hive_id": 0,
        "num_sdma_engines": 2, "num_sdma_xgmi_engines": 0, "num_sdma_queues_per_engine": 6,
        "num_cp_queues": 8, "max_engine_clk_fcompute": 2495, "local_mem_size": 0, "fw_version": 2200,
        "capability": 671588992, "debug_prop": 1495, "sdma_fw_version": 21,
        "unique_id": 0x4A1F5C7E9B3D2816, "num_xcc": 1, "max_engine_clk_ccompute": 4200,
    }  # fmt: skip
    link: Props = {
        "type": LINK_PCIE, "version_major": 0, "version_minor": 0, "node_from": 0, "node_to": 1,
        "weight": 20, "min_latency": 0, "max_latency": 0, "min_bandwidth": 0, "max_bandwidth": 32000,
        "recommended_transfer_size": 0, "flags": 1,
    }  # fmt: skip
    system_bank: Props = {
        "heap_type": 0,
        "size_in_bytes": 137438953472,
        "flags": 0,
        "width": 64,
        "mem_clk_max": 4800,
    }
    vram_bank: Props = {
        "heap_type": 1,
        "size_in_bytes": W7900_VRAM,
        "flags": 0,
        "width": 384,
        "mem_clk_max": 1124,
    }
    write_node(kfd_dir, 0, cpu, [link], mem_banks=[system_bank], gpu_id=0)
    write_node(kfd_dir, 1, gpu, [_link(link, 1, 0)], mem_banks=[vram_bank], gpu_id=48213)
    (kfd_dir / "generation_id").write_text("1\n")
    (kfd_dir / "system_properties").write_text("platform_oem 0\nplatform_id 0\nplatform_rev 0\n")
