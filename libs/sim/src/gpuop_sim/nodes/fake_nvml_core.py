"""The fake NVML's state handling and its library / handle / inventory / MIG calls (see fake_nvml)."""

from __future__ import annotations

import threading
from pathlib import Path

from gpuop_sim import gpuholders
from gpuop_sim.nodes.fake_nvml_api import (
    _MAX_MIG_DEVICES,
    NVML_DEVICE_MIG_ENABLE,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_UNINITIALIZED,
    _Attributes,
    _fail,
    _Handle,
    _Memory,
    _PciInfo,
)
from gpuop_sim.nodes.nvml_state import (
    STATE_RELPATH,
    GpuState,
    MigDeviceState,
    NvmlState,
    load_state,
    save_state,
)


class FakeNvmlCore:
    """State handling, library, handle, inventory and MIG calls of one fake NVML instance."""

    def __init__(self, state: NvmlState | None = None, path: Path | None = None) -> None:
        self._state = state
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._initialized = 0
        self._lock = threading.Lock()

    # state -------------------------------------------------------------------------------------
    def _current(self) -> NvmlState | None:
        if self._path is None:
            return self._state
        try:
            info = self._path.stat()
        except OSError:
            return None
        stamp = (info.st_mtime_ns, info.st_size)
        if stamp != self._stamp:
            self._state = load_state(self._path)
            self._stamp = stamp
        return self._state

    def _save(self) -> None:
        if self._path is not None and self._state is not None:
            save_state(self._path, self._state)
            info = self._path.stat()
            self._stamp = (info.st_mtime_ns, info.st_size)

    def _st(self) -> NvmlState:
        if not self._initialized:
            raise _fail(NVML_ERROR_UNINITIALIZED)
        state = self._current()
        if state is None or not state.library_present:
            raise _fail(NVML_ERROR_LIBRARY_NOT_FOUND)
        if not state.driver_loaded:
            raise _fail(NVML_ERROR_DRIVER_NOT_LOADED)
        return state

    def _gpu(self, handle: _Handle, fn: str, *, mig_ok: bool = True) -> GpuState:
        state = self._st()
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(state.gpus):
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        gpu = state.gpus[handle.index]
        if gpu.lost:
            raise _fail(NVML_ERROR_GPU_IS_LOST)
        if fn in gpu.unsupported or (handle.mig_slot is not None and not mig_ok):
            raise _fail(NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _mig(self, handle: _Handle, fn: str) -> MigDeviceState:
        gpu = self._gpu(handle, fn)
        found = next((m for m in gpu.mig_devices if m.slot == handle.mig_slot), None)
        if found is None:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return found

    # library -----------------------------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:  # noqa: N802
        state = self._current()
        if state is None or not state.library_present:
            raise _fail(NVML_ERROR_LIBRARY_NOT_FOUND)
        if not state.driver_loaded:
            raise _fail(NVML_ERROR_DRIVER_NOT_LOADED)
        self._initialized += 1
        if self._initialized == 1:
            self._hold(state, held=True)

    def nvmlShutdown(self) -> None:  # noqa: N802
        if not self._initialized:
            raise _fail(NVML_ERROR_UNINITIALIZED)
        self._initialized -= 1
        if not self._initialized:
            state = self._current()
            if state is not None:
                self._hold(state, held=False)

    def _root(self) -> Path | None:
        """The node root whose state file this is (`<root>/var/lib/gpuop-sim/nvml.json`)."""
        if self._path is None or self._path.parts[-len(STATE_RELPATH.parts) :] != STATE_RELPATH.parts:
            return None
        return Path(*self._path.parts[: -len(STATE_RELPATH.parts)])

    def _hold(self, state: NvmlState, *, held: bool) -> None:
        """An initialised NVML has every GPU's device file open: the driver counts this process as
        a user of each (a reset or MIG mode change is refused while another process is one)."""
        root = self._root()
        if root is None:
            return
        for gpu in state.gpus:
            pci = gpuholders.nvml_pci(gpu.bus_id)
            if held:
                gpuholders.hold(root, pci)
            else:
                gpuholders.release(root, pci)

    def _held_by_others(self, gpu: GpuState) -> bool:
        root = self._root()
        return bool(gpu.processes) or (
            root is not None and bool(gpuholders.holders(root, gpuholders.nvml_pci(gpu.bus_id)))
        )

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return self._st().driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return self._st().cuda_driver_version

    # handles -----------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self._st().gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802
        handle = _Handle(int(index))
        self._gpu(handle, "nvmlDeviceGetHandleByIndex")
        return handle

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _Handle:  # noqa: N802
        wanted = uuid.decode() if isinstance(uuid, bytes) else uuid
        for index, gpu in enumerate(self._st().gpus):
            if gpu.uuid == wanted:
                return self.nvmlDeviceGetHandleByIndex(index)
            for mig in gpu.mig_devices:
                if mig.uuid == wanted:
                    return _Handle(index, mig.slot)
        raise _fail(NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:  # noqa: N802
        self._gpu(handle, "nvmlDeviceGetIndex")
        return handle.index

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:  # noqa: N802
        if handle.mig_slot is not None:
            return self._mig(handle, "nvmlDeviceGetUUID").uuid
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle: _Handle) -> str:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetName")
        if handle.mig_slot is not None:
            return f"{gpu.name} MIG {self._mig(handle, 'nvmlDeviceGetName').profile}"
        return gpu.name

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> _PciInfo:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetPciInfo")
        domain, bus, rest = gpu.bus_id.split(":")
        dev = rest.split(".")[0]
        legacy = f"{int(domain, 16):04X}:{bus}:{rest}".upper()
        return _PciInfo(
            busIdLegacy=legacy.encode(),
            busId=gpu.bus_id.upper().encode(),
            domain=int(domain, 16),
            bus=int(bus, 16),
            device=int(dev, 16),
            pciDeviceId=gpu.pci_device_id,
            pciSubSystemId=gpu.pci_subsystem_id,
        )

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> _Memory:  # noqa: N802
        if handle.mig_slot is not None:
            mig = self._mig(handle, "nvmlDeviceGetMemoryInfo")
            return _Memory(mig.memory_total, mig.memory_total - mig.memory_used, mig.memory_used)
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        return _Memory(gpu.memory_total, gpu.memory_total - gpu.memory_used, gpu.memory_used)

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:  # noqa: N802
        major, minor = self._gpu(handle, "nvmlDeviceGetCudaComputeCapability").compute_capability
        return (major, minor)

    def nvmlDeviceGetArchitecture(self, device: _Handle) -> int:  # noqa: N802
        return self._gpu(device, "nvmlDeviceGetArchitecture").architecture

    def nvmlDeviceGetMinorNumber(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetMinorNumber", mig_ok=False).minor_number

    def nvmlDeviceGetSerial(self, handle: _Handle) -> str:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetSerial").serial

    def nvmlDeviceGetVbiosVersion(self, handle: _Handle) -> str:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetVbiosVersion").vbios_version

    def nvmlDeviceGetNumaNodeId(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetNumaNodeId").numa_node

    def nvmlDeviceGetAttributes(self, device: _Handle) -> _Attributes:  # noqa: N802
        gpu = self._gpu(device, "nvmlDeviceGetAttributes")
        if device.mig_slot is None:
            return _Attributes(gpu.multiprocessor_count, 7, 7, 0, 7, 1, 8, 8, gpu.memory_total >> 20)
        mig = self._mig(device, "nvmlDeviceGetAttributes")
        return _Attributes(
            mig.multiprocessor_count, 1, 1, 0, 1, 0, mig.gi_slices, mig.ci_slices, mig.memory_total >> 20
        )

    # MIG ---------------------------------------------------------------------------------------
    def nvmlDeviceGetMigMode(self, device: _Handle) -> list[int]:  # noqa: N802
        gpu = self._gpu(device, "nvmlDeviceGetMigMode", mig_ok=False)
        if not gpu.mig_capable:
            raise _fail(NVML_ERROR_NOT_SUPPORTED)
        return [gpu.mig_current, gpu.mig_pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: _Handle) -> int:  # noqa: N802
        gpu = self._gpu(device, "nvmlDeviceGetMaxMigDeviceCount", mig_ok=False)
        return _MAX_MIG_DEVICES if gpu.mig_capable else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: _Handle, index: int) -> _Handle:  # noqa: N802
        gpu = self._gpu(device, "nvmlDeviceGetMigDeviceHandleByIndex", mig_ok=False)
        if gpu.mig_current != NVML_DEVICE_MIG_ENABLE:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        if not any(m.slot == index for m in gpu.mig_devices):
            raise _fail(NVML_ERROR_NOT_FOUND)
        return _Handle(device.index, int(index))

    def nvmlDeviceIsMigDeviceHandle(self, device: _Handle) -> int:  # noqa: N802
        return 1 if device.mig_slot is not None else 0

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: _Handle) -> _Handle:  # noqa: N802, N803
        self._mig(migDevice, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        return _Handle(migDevice.index)

    def nvmlDeviceGetGpuInstanceId(self, device: _Handle) -> int:  # noqa: N802
        if device.mig_slot is None:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return self._mig(device, "nvmlDeviceGetGpuInstanceId").gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device: _Handle) -> int:  # noqa: N802
        if device.mig_slot is None:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return self._mig(device, "nvmlDeviceGetComputeInstanceId").compute_instance_id
