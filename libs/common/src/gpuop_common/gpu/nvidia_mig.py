"""NVIDIA MIG writes through NVML: mode, and GPU/compute instances for a wanted layout.

Only pynvml calls with plain arguments are used (no ctypes arrays): instances are found through
the MIG device handles and by id, which is also how a half-applied layout (a GPU instance left
without its compute instance by a crash) is cleaned up.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from gpuop_common.gpu import nvml_calls as nc
from gpuop_common.gpu.errors import PartitionWriteError
from gpuop_common.gpu.mig_geometry import placements

log = logging.getLogger(__name__)

MIG_DISABLE = 0
MIG_ENABLE = 1
MAX_GPU_INSTANCE_ID = 15  # GPU instance ids are small (0..14 on 7-slice GPUs)
GI_PROFILE_COUNT = 0x12  # NVML_GPU_INSTANCE_PROFILE_COUNT
ENGINE_PROFILE_SHARED = 0
# NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE by slice count.
CI_PROFILE_FOR_SLICES = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4, 8: 0x5, 6: 0x6}


def _error_name(exc: BaseException) -> str:
    return type(exc).__name__  # pynvml: NVMLError_InsufficientResources, NVMLError_InUse, ...


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
            raise PartitionWriteError(self.gpu_id, fn_name, str(exc), _error_name(exc)) from exc

    def mode(self) -> int:
        current, _pending = self._call("nvmlDeviceGetMigMode", self.handle)
        return int(current)

    def set_mode(self, enabled: bool) -> None:
        wanted = MIG_ENABLE if enabled else MIG_DISABLE
        if self.mode() != wanted:
            self._call("nvmlDeviceSetMigMode", self.handle, wanted)
            log.info("GPU %s: MIG mode set to %s", self.gpu_id, "on" if enabled else "off")

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

    def destroy_all(self) -> None:
        """Every compute instance, then every GPU instance (also ones left without compute instance)."""
        if self.mode() != MIG_ENABLE:
            return
        for gi_id in range(MAX_GPU_INSTANCE_ID):
            try:
                gi = self.nvml.nvmlDeviceGetGpuInstanceById(self.handle, gi_id)
            except self.nvml.NVMLError:
                continue  # NVML_ERROR_NOT_FOUND: no such instance
            for ci_id in range(8):
                try:
                    ci = self.nvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
                except self.nvml.NVMLError:
                    continue
                self._call("nvmlComputeInstanceDestroy", ci)
            self._call("nvmlGpuInstanceDestroy", gi)
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
        log.info("GPU %s: MIG layout %s created", self.gpu_id, dict(devices))

    def apply(self, enabled: bool, devices: dict[str, int]) -> None:
        if not enabled:
            self.destroy_all()
            self.set_mode(False)
            return
        self.set_mode(True)
        if self.layout() == Counter(devices) and not self._orphans():
            return
        self.destroy_all()
        self.create(devices)

    def _orphans(self) -> bool:
        """A GPU instance without its compute instance (left by an interrupted apply)."""
        with_devices = 0
        for gi_id in range(MAX_GPU_INSTANCE_ID):
            try:
                self.nvml.nvmlDeviceGetGpuInstanceById(self.handle, gi_id)
            except self.nvml.NVMLError:
                continue
            with_devices += 1
        return with_devices != sum(self.layout().values())
