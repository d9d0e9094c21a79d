"""KFD topology (`/sys/class/kfd/kfd/topology/nodes/*`): parsing and grouping into physical GPUs.

Pure functions over the parsed nodes, plus one reader that turns a bad node into a log line naming the
file instead of an exception (a half-written topology during a driver reload is normal).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path

from gpuop_common.gpu.errors import SysfsReadError
from gpuop_common.gpu.sysfs import list_dir, parse_int, parse_properties, read_parsed

log = logging.getLogger(__name__)

KFD_TOPOLOGY = Path("sys/class/kfd/kfd/topology")
HEAP_FB_PUBLIC = 1
LINK_PCIE = 2
LINK_XGMI = 11


@dataclass(frozen=True, slots=True)
class KfdLink:
    link_type: int
    node_from: int
    node_to: int
    weight: int | None
    max_bandwidth: int | None


@dataclass(frozen=True, slots=True)
class KfdNode:
    index: int
    path: Path
    props: dict[str, int]
    gpu_id: int | None
    vram_bank_bytes: int | None
    io_links: tuple[KfdLink, ...]
    p2p_links: tuple[KfdLink, ...]

    @property
    def is_gpu(self) -> bool:
        return self.props.get("simd_count", 0) > 0

    def prop(self, key: str) -> int | None:
        return self.props.get(key)

    @property
    def location_id(self) -> int:
        return self.props.get("location_id", 0)

    @property
    def bdf(self) -> str:
        return bdf_from_location(self.props.get("domain", 0), self.location_id)

    @property
    def parent_bdf(self) -> str:
        """Partitions carry their index in the function bits; the GPU itself is function 0."""
        return bdf_from_location(self.props.get("domain", 0), self.location_id & ~0x7)

    @property
    def function(self) -> int:
        return self.location_id & 0x7

    @property
    def render_minor(self) -> int | None:
        minor = self.props.get("drm_render_minor")
        return minor if minor else None

    @property
    def compute_units(self) -> int | None:
        simd, per_cu = self.props.get("simd_count"), self.props.get("simd_per_cu")
        if not simd or not per_cu:
            return None
        return simd // per_cu


def bdf_from_location(domain: int, location_id: int) -> str:
    bus = (location_id >> 8) & 0xFF
    dev = (location_id >> 3) & 0x1F
    fn = location_id & 0x7
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn:x}"


def _read_links(node_dir: Path, sub: str) -> tuple[KfdLink, ...]:
    links: list[KfdLink] = []
    entries = list_dir(node_dir / sub)
    for link_dir in sorted(entries, key=lambda p: (not p.name.isdigit(), p.name.zfill(6))):
        try:
            props = read_parsed(link_dir / "properties", parse_properties)
        except SysfsReadError as exc:
            log.warning("skipping KFD link %s: %s %s", exc.path, exc.kind, exc.detail)
            continue
        if "node_from" not in props or "node_to" not in props:
            log.warning("skipping KFD link %s: no node_from/node_to", link_dir / "properties")
            continue
        links.append(
            KfdLink(
                link_type=props.get("type", 0),
                node_from=props["node_from"],
                node_to=props["node_to"],
                weight=props.get("weight"),
                max_bandwidth=props.get("max_bandwidth"),
            )
        )
    return tuple(links)


def _vram_bank(node_dir: Path) -> int | None:
    total = 0
    for bank in list_dir(node_dir / "mem_banks"):
        try:
            props = read_parsed(bank / "properties", parse_properties)
        except SysfsReadError as exc:
            log.warning("skipping KFD memory bank %s: %s %s", exc.path, exc.kind, exc.detail)
            continue
        if props.get("heap_type") == HEAP_FB_PUBLIC:
            total += props.get("size_in_bytes", 0)
    return total or None


def read_node(node_dir: Path, index: int) -> KfdNode | None:
    try:
        props = read_parsed(node_dir / "properties", parse_properties)
    except SysfsReadError as exc:
        log.warning("skipping KFD node %s: %s %s", exc.path, exc.kind, exc.detail)
        return None
    gpu_id: int | None = None
    if (node_dir / "gpu_id").exists():
        try:
            gpu_id = read_parsed(node_dir / "gpu_id", parse_int) or None
        except SysfsReadError as exc:
            log.warning("ignoring KFD gpu_id %s: %s %s", exc.path, exc.kind, exc.detail)
    return KfdNode(
        index=index,
        path=node_dir,
        props=props,
        gpu_id=gpu_id,
        vram_bank_bytes=_vram_bank(node_dir),
        io_links=_read_links(node_dir, "io_links"),
        p2p_links=_read_links(node_dir, "p2p_links"),
    )


def read_topology(root: Path) -> list[KfdNode]:
    """All readable KFD nodes under the host root, in node-index order; [] when KFD is absent."""
    nodes: list[KfdNode] = []
    for entry in list_dir(root / KFD_TOPOLOGY / "nodes"):
        if not entry.name.isdigit():
            continue
        node = read_node(entry, int(entry.name))
        if node is not None:
            nodes.append(node)
    return sorted(nodes, key=lambda n: n.index)


def group_by_gpu(nodes: list[KfdNode]) -> dict[str, list[KfdNode]]:
    """GPU nodes keyed by parent PCI address, partitions ordered by function.

    Two nodes with the same location are not two partitions but one node listed twice (the
    `single-gpu-plus-copy` capture, or a topology rebuilt mid-read): the first wins, the rest are
    dropped with a warning naming the node directory.
    """
    groups: dict[str, list[KfdNode]] = {}
    for node in nodes:
        if not node.is_gpu:
            continue
        members = groups.setdefault(node.parent_bdf, [])
        duplicate = next((m for m in members if m.location_id == node.location_id), None)
        if duplicate is not None:
            log.warning(
                "KFD node %s duplicates node %s (same PCI location %s); ignoring it",
                node.path,
                duplicate.path,
                node.bdf,
            )
            continue
        members.append(node)
    for members in groups.values():
        members.sort(key=lambda n: n.function)
    return groups


class TopologyCache:
    """Re-parses KFD only when it changed: the kernel bumps `generation_id` on every rebuild.

    The key also holds the node-dir listing, so a vanished node is seen even without a bump; a
    topology without `generation_id` (some captures) is parsed on every call. Thread-safe, so the
    backends of concurrent runs can share one (the test runner's executor does).
    """

    def __init__(self) -> None:
        self._key: tuple[bytes, tuple[str, ...]] | None = None
        self._nodes: list[KfdNode] = []
        self._lock = threading.Lock()

    def read(self, root: Path) -> list[KfdNode]:
        topology = root / KFD_TOPOLOGY
        with self._lock:
            try:
                generation = (topology / "generation_id").read_bytes()
                listing = tuple(sorted(p.name for p in (topology / "nodes").iterdir()))
            except OSError:
                self._key = None
                return read_topology(root)
            key = (generation, listing)
            if key != self._key:
                self._nodes = read_topology(root)
                self._key = key
            return self._nodes
