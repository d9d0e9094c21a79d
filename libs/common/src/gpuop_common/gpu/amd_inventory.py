"""Build the AMD GPU inventory from KFD topology + DRM/PCI sysfs (pure over the parsed inputs)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from gpuop_common.gpu import amd_ids
from gpuop_common.gpu.amd_drm import DrmInventory, pci_device_dir, scan_drm
from gpuop_common.gpu.amd_topology import (
    LINK_PCIE,
    LINK_XGMI,
    KfdNode,
    TopologyCache,
    group_by_gpu,
    read_topology,
)
from gpuop_common.gpu.models import (
    ComputePartition,
    GpuDevice,
    GpuLink,
    LinkType,
    PartitionState,
    PciIds,
    Vendor,
)
from gpuop_common.gpu.sysfs import parse_hex, parse_int, parse_mode_list, read_optional

log = logging.getLogger(__name__)

DEV_KFD = "/dev/kfd"
_LINK_TYPES = {LINK_XGMI: LinkType.XGMI, LINK_PCIE: LinkType.PCIE}
_LINK_PREFERENCE = {LinkType.XGMI: 0, LinkType.NVLINK: 0, LinkType.PCIE: 1, LinkType.OTHER: 2}


@dataclass(frozen=True, slots=True)
class AmdGpuSource:
    """Where one GPU's facts came from; kept so health and telemetry re-read the same files."""

    bdf: str
    device_dir: Path | None
    kfd_nodes: tuple[KfdNode, ...]


def _text(path: Path) -> str | None:
    return read_optional(path, str)


def _unique_id(device_dir: Path | None, nodes: tuple[KfdNode, ...], bdf: str) -> str:
    if device_dir is not None:
        raw = _text(device_dir / "unique_id")
        if raw:
            try:
                return f"{int(raw, 16):016x}"
            except ValueError:
                log.warning("ignoring %s: not hex: %r", device_dir / "unique_id", raw)
    kfd_uid = nodes[0].prop("unique_id") if nodes else None
    if kfd_uid:
        return f"{kfd_uid:016x}"
    return bdf


def _partition_state(device_dir: Path | None) -> PartitionState | None:
    if device_dir is None:
        return None
    compute = _text(device_dir / "current_compute_partition")
    memory = _text(device_dir / "current_memory_partition")
    avail_compute = read_optional(device_dir / "available_compute_partition", parse_mode_list) or ()
    avail_memory = read_optional(device_dir / "available_memory_partition", parse_mode_list) or ()
    if compute is None and memory is None and not avail_compute and not avail_memory:
        return None
    return PartitionState(
        compute=compute.upper() if compute else None,
        memory=memory.upper() if memory else None,
        available_compute=avail_compute,
        available_memory=avail_memory,
    )


def _numa(device_dir: Path | None) -> int | None:
    if device_dir is None:
        return None
    numa = read_optional(device_dir / "numa_node", parse_int)
    return None if numa is None or numa < 0 else numa


def _nodes_for(card_minor: int | None, render_minor: int | None) -> tuple[str, ...]:
    nodes = [DEV_KFD]
    if card_minor is not None:
        nodes.append(f"/dev/dri/card{card_minor}")
    if render_minor is not None:
        nodes.append(f"/dev/dri/renderD{render_minor}")
    return tuple(nodes)


def _partitions(
    source: AmdGpuSource, drm: DrmInventory, state: PartitionState | None, vram: int | None
) -> tuple[ComputePartition, ...]:
    nodes = source.kfd_nodes
    partitioned = len(nodes) > 1 or (state is not None and state.compute not in (None, "SPX"))
    if not partitioned:
        return ()
    numa = _numa(source.device_dir)
    primary = drm.pci.get(source.bdf)
    result: list[ComputePartition] = []
    for node in nodes:
        render = node.render_minor
        xcp = drm.xcp_for_render(render) if render is not None else None
        if node.function == 0:
            part_id, card = source.bdf, primary.card_minor if primary else None
        elif xcp is not None:
            part_id, card = xcp.target, xcp.card_minor
        else:
            part_id, card = f"{source.bdf}-p{node.function}", None
            log.warning("no amdgpu_xcp DRM device for KFD node %s (renderD%s)", node.path, render)
        share = vram // len(nodes) if vram else None
        result.append(
            ComputePartition(
                id=part_id,
                index=node.function,
                kfd_node=node.index,
                kfd_gpu_id=node.gpu_id,
                render_minor=render or 0,
                card_minor=card,
                device_nodes=_nodes_for(card, render),
                compute_units=node.compute_units,
                simd_count=node.prop("simd_count"),
                memory_bytes=node.vram_bank_bytes or share,
                numa_node=numa,
            )
        )
    return tuple(result)


def _links(source: AmdGpuSource, owner: dict[int, str], own_id: str) -> tuple[GpuLink, ...]:
    """One entry per peer GPU: the best link kind (XGMI over PCIe, direct over p2p) and how many."""
    candidates: dict[str, list[GpuLink]] = {}
    for node in source.kfd_nodes:
        for hops, links in ((1, node.io_links), (2, node.p2p_links)):
            for link in links:
                peer = owner.get(link.node_to)
                if peer is None or peer == own_id:
                    continue
                kind = _LINK_TYPES.get(link.link_type, LinkType.OTHER)
                candidates.setdefault(peer, []).append(
                    GpuLink(peer, kind, link.weight, hops, link.max_bandwidth or None)
                )
    result: list[GpuLink] = []
    for peer, found in sorted(candidates.items()):
        best = min(found, key=lambda lk: (_LINK_PREFERENCE[lk.link_type], lk.hops or 0, lk.weight or 0))
        same = [lk for lk in found if lk.link_type == best.link_type and lk.hops == best.hops]
        bandwidth = max((lk.max_bandwidth_mbps or 0 for lk in same), default=0) or None
        result.append(GpuLink(peer, best.link_type, best.weight, best.hops, bandwidth, len(same)))
    return tuple(result)


def _module_attr(root: Path, device_dir: Path | None, name: str) -> str | None:
    """`version` / `srcversion` of the loaded amdgpu module (the in-tree module may lack them)."""
    value = _text(root / "sys/module/amdgpu" / name)
    if value is None and device_dir is not None:
        value = _text(device_dir / "driver/module" / name)
    return value


def discover_sources(
    root: Path, cache: TopologyCache | None = None
) -> tuple[list[AmdGpuSource], DrmInventory]:
    groups = group_by_gpu(cache.read(root) if cache is not None else read_topology(root))
    drm = scan_drm(root)
    bdfs = sorted(set(groups) | set(drm.pci))
    sources = [AmdGpuSource(b, pci_device_dir(root, b, drm), tuple(groups.get(b, ()))) for b in bdfs]
    return sources, drm


def build_inventory(
    root: Path, cache: TopologyCache | None = None
) -> tuple[list[GpuDevice], list[AmdGpuSource]]:
    sources, drm = discover_sources(root, cache)
    ids = [_unique_id(s.device_dir, s.kfd_nodes, s.bdf) for s in sources]
    owner = {node.index: gpu_id for gpu_id, s in zip(ids, sources, strict=True) for node in s.kfd_nodes}
    first_dir = sources[0].device_dir if sources else None
    driver = _module_attr(root, first_dir, "version") if sources else None
    src_version = _module_attr(root, first_dir, "srcversion") if sources else None
    devices = [
        _build_one(index, gpu_id=gpu_id, source=source, drm=drm, owner=owner, driver=(driver, src_version))
        for index, (gpu_id, source) in enumerate(zip(ids, sources, strict=True))
    ]
    return devices, sources


def _build_one(
    index: int,
    *,
    gpu_id: str,
    source: AmdGpuSource,
    drm: DrmInventory,
    owner: dict[int, str],
    driver: tuple[str | None, str | None],
) -> GpuDevice:
    ddir, nodes = source.device_dir, source.kfd_nodes
    first = nodes[0] if nodes else None

    def hexattr(name: str) -> int | None:
        return read_optional(ddir / name, parse_hex) if ddir is not None else None

    device_id = hexattr("device") or (first.prop("device_id") if first else None) or 0
    pci = PciIds(
        vendor_id=hexattr("vendor") or (first.prop("vendor_id") if first else None) or 0x1002,
        device_id=device_id,
        subsystem_vendor_id=hexattr("subsystem_vendor"),
        subsystem_device_id=hexattr("subsystem_device"),
        revision=hexattr("revision"),
    )
    product = amd_ids.product_for(device_id)
    gfx = first.prop("gfx_target_version") if first else None
    if not gfx:
        gfx = product.gfx_target_version if product else None
    vram = read_optional(ddir / "mem_info_vram_total", parse_int) if ddir is not None else None
    if vram is None:
        banks = [n.vram_bank_bytes for n in nodes if n.vram_bank_bytes]
        vram = sum(banks) if banks else None
    state = _partition_state(ddir)
    primary = drm.pci.get(source.bdf)
    card = primary.card_minor if primary else None
    render = (primary.render_minor if primary else None) or (first.render_minor if first else None)
    cus = [n.compute_units for n in nodes if n.compute_units]
    simds = [n.prop("simd_count") or 0 for n in nodes]
    hive = first.prop("hive_id") if first else None
    return GpuDevice(
        vendor=Vendor.AMD,
        id=gpu_id,
        index=index,
        pci_address=source.bdf,
        pci=pci,
        model=amd_ids.marketing_name(device_id),
        product_name=_text(ddir / "product_name") if ddir is not None else None,
        family=amd_ids.family_name(gfx) if gfx else None,
        architecture=amd_ids.gfx_name(gfx) if gfx else None,
        gfx_target_version=gfx,
        vram_total_bytes=vram,
        compute_units=sum(cus) if cus else None,
        simd_count=sum(simds) or None,
        driver_version=driver[0],
        driver_src_version=driver[1],
        vbios_version=_text(ddir / "vbios_version") if ddir is not None else None,
        serial=_text(ddir / "serial_number") if ddir is not None else None,
        numa_node=_numa(ddir),
        card_minor=card,
        render_minor=render,
        kfd_nodes=tuple(n.index for n in nodes),
        device_nodes=_nodes_for(card, render),
        links=_links(source, owner, gpu_id),
        hive_id=str(hive) if hive else None,
        partition=state,
        partitions=_partitions(source, drm, state, vram),
    )
