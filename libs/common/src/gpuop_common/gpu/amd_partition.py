"""Which AMD compute/memory partition pairs a GPU accepts, and the order to write them in (pure).

The rules are the ones the amdgpu driver applies when a mode is written (GC 9.4.3 "aqua vanjaram",
MI300 class; amdgpu-sysfs.md section 3.1): partitions per mode, and a compute mode is valid only for
some XCC counts and NPS (memory partition) counts:

| compute | partitions | accepted when                                     |
| ------- | ---------- | ------------------------------------------------- |
| SPX     | 1          | NPS1                                              |
| DPX     | 2          | NPS1 or NPS2, XCC count divisible by 4            |
| TPX     | 3          | NPS1 or NPS3, XCC count divisible by 3            |
| QPX     | 4          | NPS1 or NPS4, at least 2 XCCs per partition       |
| CPX     | XCC count  | more than one XCC, XCC count divisible by the NPS |

The kernel checks the compute mode against the memory mode in force, so going from SPX/NPS1 to
CPX/NPS4 writes CPX first and NPS4 second; the way back writes NPS1 first.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPUTE_MODES = ("SPX", "DPX", "TPX", "QPX", "CPX")
MEMORY_MODES = ("NPS1", "NPS2", "NPS3", "NPS4", "NPS6", "NPS8")
COMPUTE_ATTR = "current_compute_partition"
MEMORY_ATTR = "current_memory_partition"
_FIXED_PARTITIONS = {"SPX": 1, "DPX": 2, "TPX": 3, "QPX": 4}


class PartitionPlanError(ValueError):
    """The requested pair cannot be reached on this GPU; the message says why."""


@dataclass(frozen=True, slots=True)
class PartitionWrite:
    attr: str  # current_compute_partition / current_memory_partition
    value: str


def nps_count(memory: str) -> int:
    if memory not in MEMORY_MODES:
        raise PartitionPlanError(f"unknown memory partition {memory!r} (known: {', '.join(MEMORY_MODES)})")
    return int(memory.removeprefix("NPS"))


def partition_count(compute: str, num_xcc: int) -> int:
    """KFD nodes (logical GPUs) one physical GPU shows in this compute mode."""
    if compute == "CPX":
        return num_xcc
    if compute not in _FIXED_PARTITIONS:
        raise PartitionPlanError(f"unknown compute partition {compute!r} (known: {', '.join(COMPUTE_MODES)})")
    return _FIXED_PARTITIONS[compute]


def pair_refusal(compute: str, memory: str, num_xcc: int | None) -> str | None:
    """Why the driver refuses `compute` while `memory` is in force, or None when it accepts it.

    Without a known XCC count only the NPS part of the rule is checked.
    """
    nps = nps_count(memory)
    partition_count(compute, num_xcc or 1)  # rejects unknown names
    xcc = num_xcc
    if compute == "SPX":
        ok = nps == 1
        need = "NPS1"
    elif compute == "DPX":
        ok = nps <= 2 and (xcc is None or xcc % 4 == 0)
        need = "NPS1 or NPS2 and an XCC count divisible by 4"
    elif compute == "TPX":
        ok = nps in (1, 3) and (xcc is None or xcc % 3 == 0)
        need = "NPS1 or NPS3 and an XCC count divisible by 3"
    elif compute == "QPX":
        ok = nps in (1, 4) and (xcc is None or xcc // 4 >= 2)
        need = "NPS1 or NPS4 and at least 8 XCCs"
    else:  # CPX
        ok = xcc is None or (xcc > 1 and xcc % nps == 0)
        need = f"more than one XCC and an XCC count divisible by {nps}"
    if ok:
        return None
    have = f"{xcc} XCCs" if xcc is not None else "unknown XCC count"
    return f"compute partition {compute} is refused with memory partition {memory} ({have}; needs {need})"


def plan_writes(
    current: tuple[str | None, str | None],
    target: tuple[str | None, str | None],
    available: tuple[tuple[str, ...], tuple[str, ...]],
    num_xcc: int | None,
) -> list[PartitionWrite]:
    """The writes that take a GPU from `current` to `target` through states the driver accepts.

    `target` parts that are None stay as they are. Raises PartitionPlanError naming the reason.
    """
    cur_c, cur_m = current
    want_c = target[0] if target[0] is not None else cur_c
    want_m = target[1] if target[1] is not None else cur_m
    avail_c, avail_m = available
    if target[0] is not None and target[0] not in avail_c:
        raise PartitionPlanError(
            f"compute partition {target[0]} is not available (available: {', '.join(avail_c) or 'none'})"
        )
    if target[1] is not None and target[1] not in avail_m:
        raise PartitionPlanError(
            f"memory partition {target[1]} is not available (available: {', '.join(avail_m) or 'none'})"
        )
    if want_c is not None and want_m is not None:
        refusal = pair_refusal(want_c, want_m, num_xcc)
        if refusal:
            raise PartitionPlanError(refusal)
    compute_changes = want_c is not None and want_c != cur_c
    memory_changes = want_m is not None and want_m != cur_m
    if not memory_changes:
        return [PartitionWrite(COMPUTE_ATTR, want_c)] if compute_changes and want_c else []
    assert want_m is not None
    if not compute_changes or want_c is None:
        return [PartitionWrite(MEMORY_ATTR, want_m)]
    # Both change: the first write must be accepted with the other value still in force.
    if cur_m is None or pair_refusal(want_c, cur_m, num_xcc) is None:
        return [PartitionWrite(COMPUTE_ATTR, want_c), PartitionWrite(MEMORY_ATTR, want_m)]
    if cur_c is None or pair_refusal(cur_c, want_m, num_xcc) is None:
        return [PartitionWrite(MEMORY_ATTR, want_m), PartitionWrite(COMPUTE_ATTR, want_c)]
    for middle in avail_c:
        if pair_refusal(middle, cur_m, num_xcc) is None and pair_refusal(middle, want_m, num_xcc) is None:
            return [
                PartitionWrite(COMPUTE_ATTR, middle),
                PartitionWrite(MEMORY_ATTR, want_m),
                PartitionWrite(COMPUTE_ATTR, want_c),
            ]
    raise PartitionPlanError(
        f"no order of writes reaches {want_c}/{want_m} from {cur_c}/{cur_m}: every middle pair is refused"
    )
