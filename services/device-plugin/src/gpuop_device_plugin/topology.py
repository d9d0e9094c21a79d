"""Topology-aware GetPreferredAllocation (pure).

Cost of putting two devices in one container, lowest first:
  same physical GPU (partitions packed together)                1
  same XGMI hive / NVLink clique, or a direct XGMI/NVLink link  10
  same NUMA node                                                20
  anything else                                                 40
A set costs the sum over its pairs. The search is greedy from every possible seed (or from the
must-include devices), adding the cheapest device each step; ties go to GPUs with fewer free
partitions (so whole GPUs stay free) and then to the smaller device id, so equal inputs always give
equal answers. Replicas of shared devices are spread: least-used device first.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from gpuop_device_plugin.devices import PluginDevice

SAME_GPU, SAME_FABRIC, SAME_NUMA, FAR = 1, 10, 20, 40


def pair_cost(a: PluginDevice, b: PluginDevice) -> int:
    if a.physical_id == b.physical_id:
        return SAME_GPU
    if (a.hive is not None and a.hive == b.hive) or b.physical_id in a.linked_peers:
        return SAME_FABRIC
    if a.numa_node is not None and a.numa_node == b.numa_node:
        return SAME_NUMA
    return FAR


def _grow(
    start: list[PluginDevice], pool: list[PluginDevice], size: int, free_parts: Mapping[str, int]
) -> tuple[int, list[PluginDevice]]:
    chosen = list(start)
    remaining = [d for d in pool if d not in chosen]
    acc = {d.id: sum(pair_cost(c, d) for c in chosen) for d in remaining}
    total = sum(pair_cost(x, y) for i, x in enumerate(chosen) for y in chosen[i + 1 :])
    while len(chosen) < size and remaining:
        best = min(remaining, key=lambda d: (acc[d.id], free_parts[d.physical_id], d.id))
        total += acc[best.id]
        chosen.append(best)
        remaining.remove(best)
        for d in remaining:
            acc[d.id] += pair_cost(best, d)
    return total, chosen


def preferred_devices(
    available: Sequence[PluginDevice], must_include: Sequence[PluginDevice], size: int
) -> list[str]:
    """The ids to prefer for one container (must-include first, then the rest in pick order)."""
    must = list(dict.fromkeys(must_include))
    if size <= len(must):
        return [d.id for d in must]
    pool = sorted({d.id: d for d in [*available, *must]}.values(), key=lambda d: d.id)
    if any(d.shared for d in pool):
        return _spread_replicas(pool, must, size)
    free_parts = Counter(d.physical_id for d in pool)
    if must:
        return [d.id for d in _grow(must, pool, size, free_parts)[1]]
    best: tuple[int, int, list[str]] | None = None
    picked: list[PluginDevice] = []
    # Partitions of one GPU are interchangeable as seeds: one seed per physical GPU is enough.
    seeds = {d.physical_id: d for d in reversed(pool)}
    for seed in sorted(seeds.values(), key=lambda d: d.id):
        total, chosen = _grow([seed], pool, size, free_parts)
        frag = sum(free_parts[d.physical_id] for d in chosen)
        key = (total, frag, sorted(d.id for d in chosen))
        if best is None or key < best:
            best = key
            picked = chosen
    return [d.id for d in picked] if best is not None else []


def _spread_replicas(pool: list[PluginDevice], must: list[PluginDevice], size: int) -> list[str]:
    """NVIDIA's `distributed` policy: each pick goes to the device with the fewest replicas picked
    this round, then the one with the most free replicas (the least used overall)."""
    free = Counter(d.base_id for d in pool)
    picked = Counter(d.base_id for d in must)
    chosen = list(must)
    remaining = [d for d in pool if d not in chosen]
    while len(chosen) < size and remaining:
        best = min(remaining, key=lambda d: (picked[d.base_id], -free[d.base_id], d.id))
        chosen.append(best)
        remaining.remove(best)
        picked[best.base_id] += 1
    return [d.id for d in chosen]
