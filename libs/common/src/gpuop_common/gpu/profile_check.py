"""A partition profile against the GPUs of one node (pure): what each GPU must become, or why not.

`plan_profile` turns a PartitionProfile and the node's inventory into one target per GPU it touches
(an AMD GPU takes the first `amdModels` entry naming its model, else `amd`; an NVIDIA group with
`models` covers only GPUs of those models) and a list of reasons it cannot be applied (a mode the
GPU does not offer, a compute/memory pair the driver refuses, a MIG layout that does not fit, a GPU
index that does not exist). A non-empty list means: touch nothing. `gpu_matches` says whether a
GPU is already in its target state.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpuop_common.config.config_manager import AmdPartition, PartitionProfile
from gpuop_common.gpu.amd_partition import PartitionPlanError, pair_refusal, plan_writes
from gpuop_common.gpu.matching import model_matches
from gpuop_common.gpu.mig_geometry import fit_refusal
from gpuop_common.gpu.models import GpuDevice, Vendor

__all__ = ["GpuTarget", "ProfilePlan", "gpu_matches", "model_matches", "plan_profile"]


@dataclass(frozen=True, slots=True)
class GpuTarget:
    gpu_id: str
    index: int  # position among the node's GPUs of this vendor
    vendor: Vendor
    compute: str | None = None  # AMD
    memory: str | None = None  # AMD
    mig_enabled: bool | None = None  # NVIDIA
    mig_devices: Mapping[str, int] = field(default_factory=dict)  # NVIDIA

    @property
    def describe(self) -> str:
        if self.vendor is Vendor.AMD:
            return f"{self.compute}/{self.memory}"
        if not self.mig_enabled:
            return "MIG off"
        return "MIG " + "+".join(f"{n}x{p}" for p, n in sorted(self.mig_devices.items()))


@dataclass(frozen=True, slots=True)
class ProfilePlan:
    profile: str
    targets: tuple[GpuTarget, ...]
    reasons: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not self.reasons


def _by_vendor(gpus: list[GpuDevice], vendor: Vendor) -> list[GpuDevice]:
    return sorted((g for g in gpus if g.vendor is vendor), key=lambda g: g.index)


def _amd_entries(profile: PartitionProfile) -> list[tuple[str, AmdPartition, tuple[str, ...]]]:
    """(field name, partition, models; empty = any) in the order a GPU looks for its entry."""
    entries: list[tuple[str, AmdPartition, tuple[str, ...]]] = [
        (f"amdModels[{n}]", entry, tuple(entry.models)) for n, entry in enumerate(profile.amd_models)
    ]
    if profile.amd is not None:
        entries.append(("amd", profile.amd, ()))
    return entries


def _amd_targets(
    profile: PartitionProfile, gpus: list[GpuDevice], xcc: Mapping[str, int | None], reasons: list[str]
) -> list[GpuTarget]:
    entries = _amd_entries(profile)
    targets: list[GpuTarget] = []
    present = _by_vendor(gpus, Vendor.AMD)
    for field_name, entry, _models in entries:
        for index in sorted(set(entry.skipped_gpus) - set(range(len(present)))):
            reasons.append(
                f"{field_name}.skippedGpus: GPU index {index} does not exist ({len(present)} AMD GPUs)"
            )
    for index, gpu in enumerate(present):
        chosen = next((e for e in entries if not e[2] or any(model_matches(m, gpu) for m in e[2])), None)
        if chosen is None:
            continue  # a model no entry names, and no `amd` for the rest: left as it is
        amd = chosen[1]
        if index in amd.skipped_gpus:
            continue
        where = f"AMD GPU {index} ({gpu.pci_address})"
        state = gpu.partition
        if state is None:
            reasons.append(f"{where}: has no partition files (compute/memory partitioning not supported)")
            continue
        compute, memory = amd.compute_partition, amd.memory_partition
        ok = True
        for wanted, available, what in (
            (compute, state.available_compute, "compute"),
            (memory, state.available_memory, "memory"),
        ):
            if wanted not in available:
                reasons.append(
                    f"{where}: {what} partition {wanted} is not available "
                    f"(available: {', '.join(available) or 'none'})"
                )
                ok = False
        if not ok:
            continue
        refusal = pair_refusal(compute, memory, xcc.get(gpu.id))
        if refusal is not None:
            reasons.append(f"{where}: {refusal}")
            continue
        try:
            plan_writes(
                (state.compute, state.memory),
                (compute, memory),
                (state.available_compute, state.available_memory),
                xcc.get(gpu.id),
            )
        except PartitionPlanError as exc:
            reasons.append(f"{where}: {exc}")
            continue
        targets.append(GpuTarget(gpu.id, index, Vendor.AMD, compute=compute, memory=memory))
    return targets


def _nvidia_targets(profile: PartitionProfile, gpus: list[GpuDevice], reasons: list[str]) -> list[GpuTarget]:
    if profile.nvidia is None:
        return []
    present = _by_vendor(gpus, Vendor.NVIDIA)
    claimed: dict[int, int] = {}
    targets: list[GpuTarget] = []
    for number, group in enumerate(profile.nvidia):
        indices = group.devices or list(range(len(present)))
        for index in indices:
            where = f"nvidia[{number}].devices: GPU index {index}"
            if index >= len(present):
                reasons.append(f"{where} does not exist ({len(present)} NVIDIA GPUs)")
                continue
            if group.models and not any(model_matches(m, present[index]) for m in group.models):
                if group.devices:  # named by index, yet not of the group's models
                    names = ", ".join(group.models)
                    reasons.append(f"{where} is a {present[index].model}, not one of models {names}")
                continue
            if index in claimed:
                reasons.append(f"{where} is already set by nvidia[{claimed[index]}]")
                continue
            claimed[index] = number
            gpu = present[index]
            if group.mig_enabled and gpu.partition is None:
                reasons.append(f"NVIDIA GPU {index} ({gpu.model}): not MIG capable")
                continue
            refusal = fit_refusal(gpu.model, dict(group.mig_devices)) if group.mig_enabled else None
            if refusal is not None:
                reasons.append(f"NVIDIA GPU {index}: {refusal}")
                continue
            targets.append(
                GpuTarget(
                    gpu.id,
                    index,
                    Vendor.NVIDIA,
                    mig_enabled=group.mig_enabled,
                    mig_devices=dict(group.mig_devices) if group.mig_enabled else {},
                )
            )
    return targets


def plan_profile(
    profile: PartitionProfile, gpus: list[GpuDevice], xcc: Mapping[str, int | None] | None = None
) -> ProfilePlan:
    """Targets for the GPUs the profile covers; `xcc` is the XCC count per AMD GPU id (KFD num_xcc)."""
    reasons: list[str] = []
    targets = _amd_targets(profile, gpus, xcc or {}, reasons) + _nvidia_targets(profile, gpus, reasons)
    if not targets and not reasons:
        amd, nvidia = len(_by_vendor(gpus, Vendor.AMD)), len(_by_vendor(gpus, Vendor.NVIDIA))
        reasons.append(
            f"profile {profile.name} has no layout for the GPUs on this node ({amd} AMD, {nvidia} NVIDIA)"
        )
    return ProfilePlan(profile.name, tuple(targets), tuple(reasons))


def gpu_matches(target: GpuTarget, gpu: GpuDevice, mig_layout: Mapping[str, int] | None = None) -> bool:
    """Whether `gpu` is already what `target` asks; `mig_layout` is the MIG profile count now."""
    state = gpu.partition
    if target.vendor is Vendor.AMD:
        return state is not None and (state.compute, state.memory) == (target.compute, target.memory)
    if state is None:
        return not target.mig_enabled
    enabled = state.compute == "mig"
    if enabled != bool(target.mig_enabled):
        return False
    return not enabled or dict(mig_layout or {}) == dict(target.mig_devices)
