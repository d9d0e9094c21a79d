"""Whether a MIG layout fits a GPU (pure): profiles, placements and a small exact packer.

NVML answers profile queries only with MIG mode on, so a layout is checked before anything is
touched against the published geometry of the GPU model (NVIDIA MIG user guide): 8 memory slices,
7 compute slices; a profile spanning `size` memory slices starts at a multiple of `size` and must fit
its compute slices in the 7. Unknown models return None: the driver decides at apply time.
"""

from __future__ import annotations

from dataclasses import dataclass

MEMORY_SLICES = 8
COMPUTE_SLICES = 7


@dataclass(frozen=True, slots=True)
class MigProfileSpec:
    name: str  # e.g. 3g.40gb
    compute_slices: int
    memory_slices: int

    @property
    def starts(self) -> tuple[int, ...]:
        return tuple(
            s
            for s in range(0, MEMORY_SLICES, self.memory_slices)
            if (s + self.memory_slices <= MEMORY_SLICES and s + self.compute_slices <= COMPUTE_SLICES)
            or (self.compute_slices == COMPUTE_SLICES and s == 0)
        )


def _specs(*rows: tuple[str, int, int]) -> dict[str, MigProfileSpec]:
    return {name: MigProfileSpec(name, c, m) for name, c, m in rows}


_80GB = _specs(("1g.10gb", 1, 1), ("1g.20gb", 1, 2), ("2g.20gb", 2, 2), ("3g.40gb", 3, 4), ("4g.40gb", 4, 4),
               ("7g.80gb", 7, 8))  # fmt: skip
_40GB = _specs(("1g.5gb", 1, 1), ("1g.10gb", 1, 2), ("2g.10gb", 2, 2), ("3g.20gb", 3, 4), ("4g.20gb", 4, 4),
               ("7g.40gb", 7, 8))  # fmt: skip
_141GB = _specs(("1g.18gb", 1, 1), ("1g.35gb", 1, 2), ("2g.35gb", 2, 2), ("3g.71gb", 3, 4), ("4g.71gb", 4, 4),
                ("7g.141gb", 7, 8))  # fmt: skip
# Model-name fragments (nvmlDeviceGetName) -> profiles.
GEOMETRIES: tuple[tuple[str, dict[str, MigProfileSpec]], ...] = (
    ("H100 80GB", _80GB),
    ("H100 SXM5 80GB", _80GB),
    ("H100 PCIe", _80GB),
    ("A100-SXM4-80GB", _80GB),
    ("A100 80GB", _80GB),
    ("A100-SXM4-40GB", _40GB),
    ("A100-PCIE-40GB", _40GB),
    ("H200", _141GB),
)


def profiles_for(model: str) -> dict[str, MigProfileSpec] | None:
    for fragment, profiles in GEOMETRIES:
        if fragment in model:
            return profiles
    return None


def fit_refusal(model: str, devices: dict[str, int]) -> str | None:
    """Why `devices` ({'1g.10gb': 7}) does not fit one GPU of this model; None when it fits or is unknown."""
    profiles = profiles_for(model)
    if profiles is None:
        return None
    unknown = sorted(set(devices) - set(profiles))
    if unknown:
        return f"MIG profile {', '.join(unknown)} does not exist on {model} (has: {', '.join(profiles)})"
    wanted = [profiles[name] for name, count in devices.items() for _ in range(count)]
    compute = sum(p.compute_slices for p in wanted)
    if compute > COMPUTE_SLICES:
        return f"MIG layout needs {compute} compute slices, {model} has {COMPUTE_SLICES}"
    if placements(model, devices) is None:
        wanted.sort(key=lambda p: (-p.memory_slices, -p.compute_slices))
        memory = sum(p.memory_slices for p in wanted)
        return (
            f"MIG layout {_describe(devices)} has no placement on {model} "
            f"({memory} of {MEMORY_SLICES} memory slices, placements aligned to size)"
        )
    return None


def placements(model: str, devices: dict[str, int]) -> list[tuple[str, int, int]] | None:
    """(profile, start, memory slices) for every instance, largest first; None when it does not fit
    or the model's geometry is unknown."""
    profiles = profiles_for(model)
    if profiles is None or set(devices) - set(profiles):
        return None
    wanted = [profiles[name] for name, count in devices.items() for _ in range(count)]
    wanted.sort(key=lambda p: (-p.memory_slices, -p.compute_slices, p.name))
    if sum(p.compute_slices for p in wanted) > COMPUTE_SLICES:
        return None
    return _pack(wanted, frozenset())


def _pack(remaining: list[MigProfileSpec], used: frozenset[int]) -> list[tuple[str, int, int]] | None:
    if not remaining:
        return []
    first, rest = remaining[0], remaining[1:]
    for start in first.starts:
        span = frozenset(range(start, start + first.memory_slices))
        if span & used:
            continue
        tail = _pack(rest, used | span)
        if tail is not None:
            return [(first.name, start, first.memory_slices), *tail]
    return None


def _describe(devices: dict[str, int]) -> str:
    return "+".join(f"{count}x{name}" for name, count in sorted(devices.items()))
