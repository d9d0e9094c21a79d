"""MIG instance management of the fake NVML: GPU/compute instance profiles, create and destroy.

Same names, arguments, result fields and errors as nvidia-ml-py (NVML API reference):
- profile info needs MIG mode on (NOT_SUPPORTED otherwise); a profile the GPU lacks is NOT_SUPPORTED;
- create finds the first free placement of the profile, INSUFFICIENT_RESOURCES when none is left;
- a GPU instance with compute instances, or MIG mode off while GPU instances exist, is IN_USE;
- a compute instance with processes on it (`MigDeviceState.processes`) is IN_USE to destroy;
- a MIG mode change on a GPU held by processes (`GpuState.processes`, or another process with NVML
  initialised, `gpuop_sim.gpuholders`) is not activated: the call
  succeeds, the new mode stays pending and the activation status it returns is NVML_ERROR_IN_USE
  (the NVML reference: "if device unbind fails because the device isn't idle");
- a missing instance id is NOT_FOUND.
The geometry is the H100 80GB one: 8 memory slices, 7 compute slices, placements aligned to size.
Only compute instances spanning their whole GPU instance are modelled (the MIG devices plugins use).
"""

# pynvml's function and argument names are camelCase; the fake keeps them.
# ruff: noqa: N802, N803

from __future__ import annotations

import uuid
from dataclasses import dataclass

from gpuop_sim.nodes.fake_nvml_api import (
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
    NVML_DEVICE_MIG_DISABLE,
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_IN_USE,
    NVML_ERROR_INSUFFICIENT_RESOURCES,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_SUCCESS,
    _ComputeInstance,
    _ComputeInstanceInfo,
    _ComputeInstanceProfileInfo,
    _fail,
    _GpuInstance,
    _GpuInstanceInfo,
    _GpuInstanceProfileInfo,
    _Handle,
    _Placement,
)
from gpuop_sim.nodes.fake_nvml_core import FakeNvmlCore
from gpuop_sim.nodes.nvml_state import GpuInstanceState, GpuState, MigDeviceState

MIB = 1024**2


@dataclass(frozen=True)
class GiProfile:
    profile_id: int
    name: str
    slices: int  # compute slices
    memory_mib: int
    sms: int
    size: int  # memory slices
    starts: tuple[int, ...]


H100_80GB = (
    GiProfile(0x0, "1g.10gb", 1, 9856, 16, 1, (0, 1, 2, 3, 4, 5, 6)),
    GiProfile(0x1, "2g.20gb", 2, 20096, 32, 2, (0, 2, 4)),
    GiProfile(0x2, "3g.40gb", 3, 40192, 60, 4, (0, 4)),
    GiProfile(0x3, "4g.40gb", 4, 40192, 64, 4, (0,)),
    GiProfile(0x4, "7g.80gb", 7, 81408, 132, 8, (0,)),
    GiProfile(0x9, "1g.20gb", 1, 20096, 26, 2, (0, 2, 4, 6)),
)
_BY_ID = {p.profile_id: p for p in H100_80GB}
_BY_NAME = {p.name: p for p in H100_80GB}
_FIRST_GI_ID = {7: 0, 4: 1, 3: 1, 2: 3, 1: 7}  # H100: GPU instance ids by slice count
# Compute instance profile id per slice count (NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE).
_CI_PROFILE = {1: 0x0, 2: 0x1, 3: 0x2, 4: 0x3, 7: 0x4}


def profile_named(name: str) -> GiProfile:
    return _BY_NAME[name]


def free_start(gpu: GpuState, profile: GiProfile) -> int | None:
    used = [(gi.start, gi.start + gi.size) for gi in gpu.gpu_instances]
    for start in profile.starts:
        if all(start + profile.size <= lo or start >= hi for lo, hi in used):
            return start
    return None


def _overlaps(gpu: GpuState, start: int, size: int) -> bool:
    return any(not (start + size <= gi.start or start >= gi.start + gi.size) for gi in gpu.gpu_instances)


def add_gpu_instance(gpu: GpuState, profile: GiProfile, start: int | None = None) -> GpuInstanceState | None:
    if start is None:
        start = free_start(gpu, profile)
    elif start not in profile.starts or _overlaps(gpu, start, profile.size):
        return None
    if start is None:
        return None
    taken = {gi.id for gi in gpu.gpu_instances}
    gi_id = _FIRST_GI_ID[profile.slices]
    while gi_id in taken:
        gi_id += 1
    instance = GpuInstanceState(id=gi_id, profile_id=profile.profile_id, profile=profile.name, start=start,
                                size=profile.size)  # fmt: skip
    gpu.gpu_instances.append(instance)
    return instance


def add_compute_instance(gpu: GpuState, gi: GpuInstanceState, mig_uuid: str | None = None) -> MigDeviceState:
    profile = _BY_ID[gi.profile_id]
    slot = min(set(range(len(gpu.mig_devices) + 1)) - {m.slot for m in gpu.mig_devices})
    device = MigDeviceState(
        uuid=mig_uuid or "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"{gpu.uuid}/gi{gi.id}/ci0")),
        slot=slot,
        gpu_instance_id=gi.id,
        compute_instance_id=0,
        profile=profile.name,
        gi_slices=profile.slices,
        ci_slices=profile.slices,
        memory_total=profile.memory_mib * MIB,
        multiprocessor_count=profile.sms,
    )
    gpu.mig_devices.append(device)
    return device


class FakeNvmlMig(FakeNvmlCore):
    """MIG mode and GPU/compute instance calls."""

    def _mig_gpu(self, device: _Handle | _GpuInstance | _ComputeInstance, fn: str) -> GpuState:
        gpu = self._gpu(_Handle(device.index), fn, mig_ok=False)
        if not gpu.mig_capable or gpu.mig_current != NVML_DEVICE_MIG_ENABLE:
            raise _fail(NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _gi(self, gpu_instance: _GpuInstance, fn: str) -> tuple[GpuState, GpuInstanceState]:
        if not isinstance(gpu_instance, _GpuInstance):
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self._mig_gpu(gpu_instance, fn)
        found = next((gi for gi in gpu.gpu_instances if gi.id == gpu_instance.gi_id), None)
        if found is None:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return gpu, found

    def nvmlDeviceSetMigMode(self, device: _Handle, mode: int) -> int:
        with self._lock:
            gpu = self._gpu(device, "nvmlDeviceSetMigMode", mig_ok=False)
            if not gpu.mig_capable:
                raise _fail(NVML_ERROR_NOT_SUPPORTED)
            if mode not in (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE):
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            if mode == NVML_DEVICE_MIG_DISABLE and (gpu.gpu_instances or gpu.mig_devices):
                raise _fail(NVML_ERROR_IN_USE)
            gpu.mig_pending = int(mode)
            if mode != gpu.mig_current and self._held_by_others(gpu):
                self._save()  # pending until the GPU is idle and reset
                return NVML_ERROR_IN_USE  # the activation status pynvml returns
            # Hopper applies the change at once when no process holds the GPU.
            gpu.mig_current = int(mode)
            self._save()
        return NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: _Handle, profile: int, version: int = 2
    ) -> _GpuInstanceProfileInfo:
        self._mig_gpu(device, "nvmlDeviceGetGpuInstanceProfileInfo")
        found = _BY_ID.get(int(profile))
        if found is None:
            raise _fail(NVML_ERROR_NOT_SUPPORTED)
        return _GpuInstanceProfileInfo(
            version=version, id=found.profile_id, isP2pSupported=0, sliceCount=found.slices,
            instanceCount=len(found.starts), multiprocessorCount=found.sms, copyEngineCount=found.slices,
            decoderCount=found.slices, encoderCount=0, jpegCount=1, ofaCount=0,
            memorySizeMB=found.memory_mib, name=f"MIG {found.name}".encode(),
        )  # fmt: skip

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, device: _Handle, profileId: int) -> int:
        gpu = self._mig_gpu(device, "nvmlDeviceGetGpuInstanceRemainingCapacity")
        found = _BY_ID.get(int(profileId))
        if found is None:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        probe = gpu.model_copy(deep=True)
        count = 0
        while add_gpu_instance(probe, found) is not None:
            count += 1
        return count

    def nvmlDeviceCreateGpuInstance(self, device: _Handle, profileId: int) -> _GpuInstance:
        with self._lock:
            gpu = self._mig_gpu(device, "nvmlDeviceCreateGpuInstance")
            found = _BY_ID.get(int(profileId))
            if found is None:
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            instance = add_gpu_instance(gpu, found)
            if instance is None:
                raise _fail(NVML_ERROR_INSUFFICIENT_RESOURCES)
            self._save()
        return _GpuInstance(device.index, instance.id)

    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: _Handle, profileId: int, placement: _Placement
    ) -> _GpuInstance:
        with self._lock:
            gpu = self._mig_gpu(device, "nvmlDeviceCreateGpuInstanceWithPlacement")
            found = _BY_ID.get(int(profileId))
            if found is None or int(placement.size) != found.size:
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            instance = add_gpu_instance(gpu, found, int(placement.start))
            if instance is None:
                raise _fail(NVML_ERROR_INSUFFICIENT_RESOURCES)
            self._save()
        return _GpuInstance(device.index, instance.id)

    def nvmlDeviceGetGpuInstanceById(self, device: _Handle, gpuInstanceId: int) -> _GpuInstance:
        gpu = self._mig_gpu(device, "nvmlDeviceGetGpuInstanceById")
        if not any(gi.id == int(gpuInstanceId) for gi in gpu.gpu_instances):
            raise _fail(NVML_ERROR_NOT_FOUND)
        return _GpuInstance(device.index, int(gpuInstanceId))

    def nvmlGpuInstanceGetInfo(self, gpuInstance: _GpuInstance) -> _GpuInstanceInfo:
        _, gi = self._gi(gpuInstance, "nvmlGpuInstanceGetInfo")
        return _GpuInstanceInfo(
            _Handle(gpuInstance.index), gi.id, gi.profile_id, _Placement(gi.start, gi.size)
        )

    def nvmlGpuInstanceDestroy(self, gpuInstance: _GpuInstance) -> int:
        with self._lock:
            gpu, gi = self._gi(gpuInstance, "nvmlGpuInstanceDestroy")
            if any(m.gpu_instance_id == gi.id for m in gpu.mig_devices):
                raise _fail(NVML_ERROR_IN_USE)
            gpu.gpu_instances = [other for other in gpu.gpu_instances if other.id != gi.id]
            self._save()
        return NVML_SUCCESS

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self,
        device: _GpuInstance,
        profile: int,
        engProfile: int,
        version: int = 2,
    ) -> _ComputeInstanceProfileInfo:
        _, gi = self._gi(device, "nvmlGpuInstanceGetComputeInstanceProfileInfo")
        slices = _BY_ID[gi.profile_id].slices
        if engProfile != NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED or _CI_PROFILE.get(slices) != int(
            profile
        ):
            raise _fail(NVML_ERROR_NOT_SUPPORTED)
        return _ComputeInstanceProfileInfo(
            version=version, id=int(profile), sliceCount=slices, instanceCount=1,
            multiprocessorCount=_BY_ID[gi.profile_id].sms, sharedCopyEngineCount=slices,
            sharedDecoderCount=slices, sharedEncoderCount=0, sharedJpegCount=1, sharedOfaCount=0,
            name=f"MIG {slices}c.{gi.profile}".encode(),
        )  # fmt: skip

    def nvmlGpuInstanceCreateComputeInstance(
        self, gpuInstance: _GpuInstance, profileId: int
    ) -> _ComputeInstance:
        with self._lock:
            gpu, gi = self._gi(gpuInstance, "nvmlGpuInstanceCreateComputeInstance")
            if _CI_PROFILE.get(_BY_ID[gi.profile_id].slices) != int(profileId):
                raise _fail(NVML_ERROR_NOT_SUPPORTED)
            if any(m.gpu_instance_id == gi.id for m in gpu.mig_devices):
                raise _fail(NVML_ERROR_INSUFFICIENT_RESOURCES)
            device = add_compute_instance(gpu, gi)
            self._save()
        return _ComputeInstance(gpuInstance.index, gi.id, device.compute_instance_id)

    def nvmlGpuInstanceGetComputeInstanceById(
        self,
        gpuInstance: _GpuInstance,
        computeInstanceId: int,
    ) -> _ComputeInstance:
        gpu, gi = self._gi(gpuInstance, "nvmlGpuInstanceGetComputeInstanceById")
        if not any(
            m.gpu_instance_id == gi.id and m.compute_instance_id == computeInstanceId for m in gpu.mig_devices
        ):
            raise _fail(NVML_ERROR_NOT_FOUND)
        return _ComputeInstance(gpuInstance.index, gi.id, int(computeInstanceId))

    def nvmlComputeInstanceGetInfo(self, computeInstance: _ComputeInstance) -> _ComputeInstanceInfo:
        gpu, gi = self._gi(
            _GpuInstance(computeInstance.index, computeInstance.gi_id), "nvmlComputeInstanceGetInfo"
        )
        found = next(
            (
                m
                for m in gpu.mig_devices
                if m.gpu_instance_id == gi.id and m.compute_instance_id == computeInstance.ci_id
            ),
            None,
        )
        if found is None:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        index = computeInstance.index
        return _ComputeInstanceInfo(
            _Handle(index), _GpuInstance(index, gi.id), found.compute_instance_id,
            _CI_PROFILE[found.ci_slices], _Placement(0, found.ci_slices),
        )  # fmt: skip

    def nvmlComputeInstanceGetInfo_v2(self, computeInstance: _ComputeInstance) -> _ComputeInstanceInfo:
        return self.nvmlComputeInstanceGetInfo(computeInstance)

    def nvmlComputeInstanceDestroy(self, computeInstance: _ComputeInstance) -> int:
        with self._lock:
            if not isinstance(computeInstance, _ComputeInstance):
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            gpu = self._mig_gpu(computeInstance, "nvmlComputeInstanceDestroy")
            before = len(gpu.mig_devices)
            key = (computeInstance.gi_id, computeInstance.ci_id)
            busy = [m for m in gpu.mig_devices if (m.gpu_instance_id, m.compute_instance_id) == key]
            if any(m.processes for m in busy):
                raise _fail(NVML_ERROR_IN_USE)
            gpu.mig_devices = [
                m for m in gpu.mig_devices if (m.gpu_instance_id, m.compute_instance_id) != key
            ]
            if len(gpu.mig_devices) == before:
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            self._save()
        return NVML_SUCCESS
