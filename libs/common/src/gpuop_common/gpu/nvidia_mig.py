"""NVIDIA MIG writes through NVML: mode, and GPU/compute instances for a wanted layout.

Only pynvml calls with plain arguments are used (no ctypes arrays): instances are found through
the MIG device handles and by id, which is also how a half-applied layout (a GPU instance left
without its compute instance by a crash) is cleaned up.

A write the driver refuses leaves the GPU as it was before `apply`: a MIG mode change it could not
activate (the GPU not idle: activation status NVML_ERROR_IN_USE) is withdrawn instead of staying
pending for the GPU's next reset, and instances already destroyed or made are put back to the
layout before (same profiles at the same placements), so no GPU is left half-made.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gpuop_common.gpu import nvml_calls as nc
from gpuop_common.gpu.errors import PartitionWriteError
from gpuop_common.gpu.mig_geometry import placements

log = logging.getLogger(__name__)

NVML_SUCCESS = 0
MIG_DISABLE = 0
MIG_ENABLE = 1
MAX_GPU_INSTANCE_ID = 15  # GPU instance ids are small (0..14 on 7-slice GPUs)
MAX_COMPUTE_INSTANCE_ID = 8
GI_PROFILE_COUNT = 0x12  # NVML_GPU_INSTANCE_PROFILE_COUNT
ENGINE_PROFILE_SHARED = 0
# NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE by slice count.
CI_PROFILE_FOR_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}


def _error_name(exc: BaseException) -> str:
    return type(exc).__name__  # pynvml: NVMLError_InsufficientResources, NVMLError_InUse, ...


@dataclass(frozen=True)
class GpuInstance:
    """A MIG GPU instance as NVML reports it, with the ids of its compute instances."""

    gi_id: int
    profile_id: int
    start: int  # placement: first memory slice
    size: int
    compute_instances: tuple[int, ...]

    @property
    def key(self) -> tuple[int, int, int]:
        """What a re-made instance shares with it: profile and placement (ids and UUIDs change)."""
        return (self.profile_id, self.start, self.size)


class MigWriter:
    """MIG writes for one physical GPU handle; every NVML failure becomes a PartitionWriteError."""

    def __init__(self, nvml: Any, handle: Any, gpu_id: str, model: str = "") -> None:
        self.nvml = nvml
        self.handle = handle
        self.gpu_id = gpu_id
        self.model = model

    def _call(self, fn_name: str, *args: Any) -> Any:
        try:
            return getattr(self.nvml, fn_name)(*args)
        except self.nvml.NVMLError as exc:
            name = _error_name(exc)
            raise PartitionWriteError(self.gpu_id, fn_name, f"{exc} ({name})", name) from exc

    def modes(self) -> tuple[int, int]:
        """(current, pending) MIG mode; pending is what the GPU's next reset puts in force."""
        current, pending = self._call("nvmlDeviceGetMigMode", self.handle)
        return int(current), int(pending)

    def mode(self) -> int:
        return self.modes()[0]

    def set_mode(self, enabled: bool) -> None:
        """MIG mode on or off now, or a PartitionWriteError with the change withdrawn: NVML sets a
        mode it cannot activate (the GPU not idle) as pending and says so only in the activation
        status it returns; left pending, it would come at the GPU's next reset or reboot."""
        wanted = MIG_ENABLE if enabled else MIG_DISABLE
        if self.modes() == (wanted, wanted):
            return
        status = int(self._call("nvmlDeviceSetMigMode", self.handle, wanted) or NVML_SUCCESS)
        current = self.mode()
        if current == wanted:
            log.info("GPU %s: MIG mode set to %s", self.gpu_id, "on" if enabled else "off")
            return
        name: str | None = None
        why = "the driver left it pending until a GPU reset"
        if status != NVML_SUCCESS:
            refusal = self.nvml.NVMLError(status)
            name = _error_name(refusal)
            why = f"activation status {refusal} ({name})"
        self._call("nvmlDeviceSetMigMode", self.handle, current)  # withdraw the pending change
        detail = f"MIG mode {'on' if enabled else 'off'} not activated: {why}"
        raise PartitionWriteError(self.gpu_id, "nvmlDeviceSetMigMode", detail, name)

    def layout(self) -> Counter[str]:
        """MIG device profiles now on the GPU (empty with MIG mode off)."""
        if self.mode() != MIG_ENABLE:
            return Counter()
        count = int(self._call("nvmlDeviceGetMaxMigDeviceCount", self.handle))
        found: Counter[str] = Counter()
        for slot in range(count):
            try:
                mig = self.nvml.nvmlDeviceGetMigDeviceHandleByIndex(self.handle, slot)
            except self.nvml.NVMLError:
                continue
            name = nc.text(self._call("nvmlDeviceGetName", mig))
            profile = nc.mig_profile(name, self._call("nvmlDeviceGetAttributes", mig))
            found[profile or name] += 1
        return found

    def instances(self) -> list[GpuInstance]:
        """The GPU instances now on the GPU (none with MIG mode off), found by id."""
        if self.mode() != MIG_ENABLE:
            return []
        found: list[GpuInstance] = []
        for gi_id in range(MAX_GPU_INSTANCE_ID):
            try:
                gi = self.nvml.nvmlDeviceGetGpuInstanceById(self.handle, gi_id)
            except self.nvml.NVMLError:
                continue  # NVML_ERROR_NOT_FOUND: no such instance
            info = self._call("nvmlGpuInstanceGetInfo", gi)
            cis: list[int] = []
            for ci_id in range(MAX_COMPUTE_INSTANCE_ID):
                try:
                    self.nvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
                except self.nvml.NVMLError:
                    continue
                cis.append(ci_id)
            placement = info.placement
            found.append(
                GpuInstance(gi_id, int(info.profileId), int(placement.start), int(placement.size), tuple(cis))
            )
        return found

    def _destroy(self, instance: GpuInstance) -> None:
        gi = self._call("nvmlDeviceGetGpuInstanceById", self.handle, instance.gi_id)
        for ci_id in instance.compute_instances:
            ci = self._call("nvmlGpuInstanceGetComputeInstanceById", gi, ci_id)
            self._call("nvmlComputeInstanceDestroy", ci)
        self._call("nvmlGpuInstanceDestroy", gi)

    def destroy_all(self) -> None:
        """Every compute instance, then every GPU instance (also ones left without compute instance)."""
        for instance in self.instances():
            self._destroy(instance)
        log.info("GPU %s: MIG instances destroyed", self.gpu_id)

    def gpu_instance_profiles(self) -> dict[str, tuple[int, int]]:
        """Profile name -> (NVML profile id, compute slices), as the driver reports them (MIG on)."""
        result: dict[str, tuple[int, int]] = {}
        for const in range(GI_PROFILE_COUNT):
            try:
                info = self.nvml.nvmlDeviceGetGpuInstanceProfileInfo(self.handle, const)
            except self.nvml.NVMLError:
                continue
            name = nc.text(info.name).removeprefix("MIG ").strip()
            result.setdefault(name, (int(info.id), int(info.sliceCount)))
        return result

    def create(self, devices: dict[str, int]) -> None:
        """Create the layout, largest instances first (they have the fewest placements)."""
        profiles = self.gpu_instance_profiles()
        missing = sorted(set(devices) - set(profiles))
        if missing:
            detail = f"profile {', '.join(missing)} unknown to the driver (has: {', '.join(profiles)})"
            raise PartitionWriteError(self.gpu_id, "nvmlDeviceGetGpuInstanceProfileInfo", detail)
        # Known geometry: explicit placements (the driver's first-free choice can strand slices).
        planned = placements(self.model, devices)
        order: list[tuple[str, tuple[int, int] | None]]
        if planned is not None:
            order = [(name, (start, size)) for name, start, size in planned]
        else:
            order = [
                (n, None) for n in sorted(devices, key=lambda n: -profiles[n][1]) for _ in range(devices[n])
            ]
        for name, placement in order:
            profile_id, slices = profiles[name]
            self._make(profile_id, slices, placement)
        log.info("GPU %s: MIG layout %s created", self.gpu_id, dict(devices))

    def _make(self, profile_id: int, slices: int, placement: tuple[int, int] | None) -> None:
        """One GPU instance (at `placement` (start, size) when given) and its full compute instance."""
        if placement is not None:
            where = self.nvml.c_nvmlGpuInstancePlacement_t()
            where.start, where.size = placement
            gi = self._call("nvmlDeviceCreateGpuInstanceWithPlacement", self.handle, profile_id, where)
        else:
            gi = self._call("nvmlDeviceCreateGpuInstance", self.handle, profile_id)
        ci_const = CI_PROFILE_FOR_SLICES[slices]
        ci_info = self._call(
            "nvmlGpuInstanceGetComputeInstanceProfileInfo", gi, ci_const, ENGINE_PROFILE_SHARED
        )
        self._call("nvmlGpuInstanceCreateComputeInstance", gi, int(ci_info.id))

    def apply(self, enabled: bool, devices: dict[str, int]) -> None:
        """Put the GPU in `enabled` MIG mode with the `devices` layout; a refused write puts the GPU
        back as it was (mode and instances) and raises, saying whether that worked."""
        mode = self.mode()
        before = [i for i in self.instances() if i.compute_instances]  # a crash's orphans are not kept
        try:
            self._apply(enabled, devices)
        except PartitionWriteError as exc:
            detail = f"{exc.detail}; {self._put_back(mode, before)}"
            raise PartitionWriteError(exc.gpu_id, exc.target, detail, exc.errno_name) from exc

    def _apply(self, enabled: bool, devices: dict[str, int]) -> None:
        if not enabled:
            self.destroy_all()
            self.set_mode(False)
            return
        self.set_mode(True)
        if self.layout() == Counter(devices) and not self._orphans():
            return
        self.destroy_all()
        self.create(devices)

    def _put_back(self, mode: int, before: list[GpuInstance]) -> str:
        """MIG `mode` and the instances `before` again (keeping those still there); says how it went."""
        try:
            if mode == MIG_DISABLE:
                self.destroy_all()
                self.set_mode(False)
            else:
                self.set_mode(True)
                wanted = {i.key for i in before}
                kept: set[tuple[int, int, int]] = set()
                for instance in self.instances():
                    if instance.key in wanted and instance.compute_instances:
                        kept.add(instance.key)
                    else:
                        self._destroy(instance)  # made by the failed apply, or left without its CI
                slices = dict(self.gpu_instance_profiles().values())
                for instance in before:
                    if instance.key in kept:
                        continue
                    if instance.profile_id not in slices:
                        detail = f"GPU instance profile {instance.profile_id} unknown to the driver"
                        raise PartitionWriteError(self.gpu_id, "nvmlDeviceGetGpuInstanceProfileInfo", detail)
                    where = (instance.start, instance.size)
                    self._make(instance.profile_id, slices[instance.profile_id], where)
        except PartitionWriteError as exc:
            log.warning("GPU %s: could not put MIG back as it was: %s", self.gpu_id, exc)
            return f"putting the GPU back as it was failed too: {exc}"
        log.info("GPU %s: MIG put back as it was after a refused write", self.gpu_id)
        return "the GPU was put back as it was"

    def _orphans(self) -> bool:
        """A GPU instance without its compute instance (left by an interrupted apply)."""
        return any(not i.compute_instances for i in self.instances())
