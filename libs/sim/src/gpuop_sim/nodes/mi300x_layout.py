"""KFD topology of the simulated 8x MI300X box in any per-GPU compute partition mode.

The hardware is the one of the `mi300x-8gpu-cpx` capture: its CPU nodes, and per GPU the function-0
node (PCI location, render minor, ids, per-XCC SIMDs) and the CPU it hangs off. A mode with n
partitions gives each GPU n KFD nodes (amdgpu-sysfs.md 6.3): partition k has location_id | k, render
minor base + k, and num_xcc / SIMDs / arrays of XCC count / n. Links follow the captures: PCIe to its
CPU, XGMI to every other GPU node (same GPU weight 13 at 819200 MB/s, other GPUs weight 41; whole
GPUs to each other weight 15 at 64000 MB/s, as in kfd_gen's SPX view).
"""

from __future__ import annotations

import functools
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpuop_common.gpu.amd_partition import partition_count
from gpuop_common.gpu.amd_topology import KFD_TOPOLOGY, LINK_PCIE, LINK_XGMI, bdf_from_location
from gpuop_common.gpu.sysfs import parse_properties

from gpuop_sim.nodes.captures import capture_files
from gpuop_sim.nodes.kfd_gen import SPX_XGMI_BANDWIDTH, SPX_XGMI_WEIGHT, Props, write_node

CAPTURE = "mi300x-8gpu-cpx"
MI300X_XCC = 8
SAME_GPU_XGMI = (13, 819200)  # weight, bandwidth MB/s (capture)
OTHER_GPU_XGMI = (41, 0)  # capture


@dataclass(frozen=True)
class GpuHardware:
    bdf: str
    props: Props  # function-0 node as captured (num_xcc 1)
    cpu: int  # capture index of its CPU node
    render_base: int


@dataclass(frozen=True)
class Hardware:
    cpu_props: dict[int, Props]
    cpu_links: dict[int, list[Props]]  # CPU <-> CPU links only
    pcie_template: Props  # GPU -> CPU
    cpu_to_gpu_template: Props
    xgmi_template: Props
    gpus: tuple[GpuHardware, ...]  # PCI address order
    generation_id: str
    system_properties: str


@functools.cache
def hardware() -> Hardware:
    files = capture_files(CAPTURE)
    props = {
        int(rel.split("/")[1]): parse_properties(text)
        for rel, text in files.items()
        if rel.endswith("/properties") and rel.count("/") == 2
    }
    links: dict[int, list[Props]] = {}
    for rel, text in sorted(files.items()):
        if "/io_links/" in rel:
            links.setdefault(int(rel.split("/")[1]), []).append(parse_properties(text))
    cpus = sorted(i for i, p in props.items() if p.get("cpu_cores_count", 0) > 0)
    primaries = [i for i, p in props.items() if p.get("simd_count", 0) > 0 and p["location_id"] & 7 == 0]
    gpus = []
    for index in primaries:
        p = props[index]
        cpu_link = next(lk for lk in links[index] if lk["node_to"] in cpus)
        gpus.append(
            GpuHardware(
                bdf=bdf_from_location(p.get("domain", 0), p["location_id"]),
                props=p,
                cpu=cpu_link["node_to"],
                render_base=p["drm_render_minor"],
            )
        )
    first = primaries[0]
    cpu_to_gpu = next(lk for c in cpus for lk in links[c] if lk["node_to"] not in cpus)
    return Hardware(
        cpu_props={c: props[c] for c in cpus},
        cpu_links={c: [lk for lk in links[c] if lk["node_to"] in cpus] for c in cpus},
        pcie_template=next(lk for lk in links[first] if lk["type"] == LINK_PCIE),
        cpu_to_gpu_template=cpu_to_gpu,
        xgmi_template=next(lk for lk in links[first] if lk["type"] == LINK_XGMI),
        gpus=tuple(sorted(gpus, key=lambda g: g.bdf)),
        generation_id=files.get("generation_id", "1\n"),
        system_properties=files.get("system_properties", ""),
    )


@dataclass(frozen=True)
class LaidNode:
    index: int
    gpu: int | None  # GPU position (PCI order), None for CPU nodes
    partition: int
    props: Props
    io_links: list[Props]


def _link(template: Props, node_from: int, node_to: int, **changes: int) -> Props:
    link = dict(template)
    link["node_from"], link["node_to"] = node_from, node_to
    link.update(changes)
    return link


def plan_nodes(modes: list[str], num_xcc: int = MI300X_XCC) -> list[LaidNode]:
    """Every KFD node (CPUs first, then each GPU's partitions) for one compute mode per GPU."""
    hw = hardware()
    if len(modes) != len(hw.gpus):
        raise ValueError(f"{len(modes)} modes for {len(hw.gpus)} GPUs")
    cpu_index = {old: n for n, old in enumerate(sorted(hw.cpu_props))}
    gpu_nodes: list[tuple[int, int, int, Props]] = []  # (gpu, partition, parts, props)
    for g, (gpu, mode) in enumerate(zip(hw.gpus, modes, strict=True)):
        parts = partition_count(mode, num_xcc)
        xcc = num_xcc // parts
        per_xcc_simd = gpu.props["simd_count"] // max(gpu.props.get("num_xcc", 1), 1)
        per_xcc_arrays = gpu.props["array_count"] // max(gpu.props.get("num_xcc", 1), 1)
        for k in range(parts):
            p = dict(gpu.props)
            p.update(
                simd_count=per_xcc_simd * xcc,
                array_count=per_xcc_arrays * xcc,
                num_xcc=xcc,
                location_id=(gpu.props["location_id"] & ~7) | k,
                drm_render_minor=gpu.render_base + k,
                caches_count=0,
                mem_banks_count=0,
            )
            gpu_nodes.append((g, k, parts, p))
    first_gpu = len(cpu_index)
    index_of = {(g, k): first_gpu + n for n, (g, k, _, _) in enumerate(gpu_nodes)}
    parts_of = {g: parts for g, _, parts, _ in gpu_nodes}
    laid: list[LaidNode] = []
    for old, new in cpu_index.items():
        io = [_link(lk, new, cpu_index[lk["node_to"]]) for lk in hw.cpu_links[old]]
        for g, k, _, _ in gpu_nodes:
            if hw.gpus[g].cpu == old:
                io.append(_link(hw.cpu_to_gpu_template, new, index_of[(g, k)]))
        laid.append(LaidNode(new, None, 0, hw.cpu_props[old], io))
    for g, k, parts, p in gpu_nodes:
        me = index_of[(g, k)]
        io = [_link(hw.pcie_template, me, cpu_index[hw.gpus[g].cpu])]
        for g2, k2, _, _ in gpu_nodes:
            if (g2, k2) == (g, k):
                continue
            if g2 == g:
                weight, bandwidth = SAME_GPU_XGMI
            elif parts == 1 and parts_of[g2] == 1:
                weight, bandwidth = SPX_XGMI_WEIGHT, SPX_XGMI_BANDWIDTH
            else:
                weight, bandwidth = OTHER_GPU_XGMI
            io.append(
                _link(
                    hw.xgmi_template,
                    me,
                    index_of[(g2, k2)],
                    weight=weight,
                    min_bandwidth=bandwidth,
                    max_bandwidth=bandwidth,
                )
            )
        laid.append(LaidNode(me, g, k, p, io))
    return laid


def write_topology(root: Path, modes: list[str], num_xcc: int = MI300X_XCC) -> list[LaidNode]:
    """Rebuild `nodes/` under the root's KFD topology (generation_id is the caller's).

    The new tree is written aside and `nodes` is then switched to it in one atomic rename of a
    symlink, so a reader sees the old or the new topology, never a half-written one (rewriting
    thousands of link files in place took seconds, long enough for a plugin's rescan to catch it).
    The tree before the previous one is removed; the previous one stays for readers still in it.
    """
    nodes = plan_nodes(modes, num_xcc)
    kfd_dir = root / KFD_TOPOLOGY
    build = f".rebuild-{uuid.uuid4().hex[:12]}"
    for node in nodes:
        write_node(kfd_dir / build, node.index, node.props, node.io_links)
    link = kfd_dir / "nodes"
    keep = {build}
    if link.is_symlink():
        keep.add(Path(os.readlink(link)).parts[0])
        staged = kfd_dir / f".link-{build}"
        staged.symlink_to(Path(build) / "nodes")
        os.replace(staged, link)
    else:  # laid by the profile as a plain directory: moved aside once
        aside = kfd_dir / f".laid-{build}"
        if link.exists():
            link.rename(aside)
            keep.add(aside.name)
        link.symlink_to(Path(build) / "nodes")
    for stale in kfd_dir.glob(".*"):
        if stale.is_dir() and stale.name not in keep:
            shutil.rmtree(stale, ignore_errors=True)
    if not (kfd_dir / "system_properties").exists():
        (kfd_dir / "system_properties").write_text(hardware().system_properties)
    return nodes
