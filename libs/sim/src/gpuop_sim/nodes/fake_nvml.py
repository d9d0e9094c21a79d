"""A pynvml-shaped fake of NVML, driven by an NvmlState (in-process) or the node's JSON state file.

Same function names, argument order, constants and NVMLError subclasses as nvidia-ml-py, so the NVML
backend runs unchanged against it. Use it two ways:
- in-process: `FakeNvml(state)` is a module-like object to pass to `NvmlBackend(nvml=...)`;
- as the module `gpuop_sim.nodes.fake_nvml` (env `GPUOP_NVML_MODULE`), reading the file named by
  `GPUOP_FAKE_NVML_STATE`; no file means "no NVIDIA library" (NVMLError_LibraryNotFound).
"""

# pynvml's public names are camelCase (nvmlEventTypeXidCriticalError, ...); the fake keeps them.
# ruff: noqa: N816

from __future__ import annotations

import os
import string
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuop_sim.nodes.nvml_state import GpuState, MigDeviceState, NvmlState, load_state, save_state

STATE_ENV = "GPUOP_FAKE_NVML_STATE"

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_LOCATION_DRAM = 2
NVML_MEMORY_LOCATION_DEVICE_MEMORY = 2
NVML_MEMORY_LOCATION_SRAM = 7
NVML_NVLINK_MAX_LINKS = 36
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_DEVICE_ARCH_AMPERE = 7
NVML_DEVICE_ARCH_HOPPER = 9
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_FI_DEV_NVLINK_LINK_COUNT = 91
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_FI_DEV_PCIE_REPLAY_COUNTER = 94
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX = 138
NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX = 139
NVML_FI_DEV_POWER_AVERAGE = 185
NVML_FI_DEV_POWER_INSTANT = 186
NVML_GPU_FABRIC_STATE_NOT_SUPPORTED = 0
NVML_GPU_FABRIC_STATE_COMPLETED = 3
nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypePState = 0x4
nvmlEventTypeXidCriticalError = 0x8
nvmlEventTypeClock = 0x10
nvmlEventTypeNone = 0x0
nvmlClocksEventReasonGpuIdle = 0x1
nvmlClocksEventReasonSwPowerCap = 0x4
nvmlClocksEventReasonHwSlowdown = 0x8
nvmlClocksEventReasonSwThermalSlowdown = 0x20
NO_MIG_ID = 0xFFFFFFFF
_MAX_MIG_DEVICES = 7
_HOPPER_NVLINKS = 18
_SUPPORTED_EVENTS = (
    nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeXidCriticalError
)

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """Like pynvml.NVMLError: `NVMLError(code)` builds the matching NVMLError_<Name> subclass."""

    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: N815 - pynvml's name
    value: int

    def __new__(cls, value: int) -> NVMLError:
        target = NVMLError._valClassMapping.get(value, cls) if cls is NVMLError else cls
        obj = Exception.__new__(target)
        obj.value = value
        return obj

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)

    def __str__(self) -> str:
        return _ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _make_error_classes() -> None:
    module = sys.modules[__name__]
    for name in [n for n in dir(module) if n.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        code = getattr(module, name)
        cls = type(class_name, (NVMLError,), {"__new__": _fixed_new(code), "__module__": __name__})
        setattr(module, class_name, cls)
        NVMLError._valClassMapping[code] = cls


def _fixed_new(code: int) -> Any:
    def new(cls: type[NVMLError], *args: Any) -> NVMLError:
        obj = Exception.__new__(cls)
        obj.value = code
        return obj

    return new


_make_error_classes()


def nvmlErrorString(result: int) -> str:  # noqa: N802
    return _ERROR_STRINGS.get(result, "Unknown Error")


def byref(obj: Any) -> Any:
    """ctypes.byref stand-in: the fake fills the object itself."""
    return obj


@dataclass
class c_nvmlGpuFabricInfo_t:  # noqa: N801 - pynvml's name
    clusterUuid: list[int] = field(default_factory=lambda: [0] * 16)  # noqa: N815
    status: int = 0
    cliqueId: int = 0  # noqa: N815
    state: int = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED


@dataclass(frozen=True)
class _Handle:
    index: int
    mig_slot: int | None = None


@dataclass
class _PciInfo:
    busIdLegacy: bytes  # noqa: N815
    busId: bytes  # noqa: N815
    domain: int
    bus: int
    device: int
    pciDeviceId: int  # noqa: N815
    pciSubSystemId: int  # noqa: N815


@dataclass
class _Memory:
    total: int
    free: int
    used: int


@dataclass
class _Utilization:
    gpu: int
    memory: int


@dataclass
class _Attributes:
    multiprocessorCount: int  # noqa: N815
    sharedCopyEngineCount: int  # noqa: N815
    sharedDecoderCount: int  # noqa: N815
    sharedEncoderCount: int  # noqa: N815
    sharedJpegCount: int  # noqa: N815
    sharedOfaCount: int  # noqa: N815
    gpuInstanceSliceCount: int  # noqa: N815
    computeInstanceSliceCount: int  # noqa: N815
    memorySizeMB: int  # noqa: N815


@dataclass
class _Value:
    dVal: float = 0.0  # noqa: N815
    uiVal: int = 0  # noqa: N815
    ulVal: int = 0  # noqa: N815
    ullVal: int = 0  # noqa: N815
    sllVal: int = 0  # noqa: N815
    siVal: int = 0  # noqa: N815
    usVal: int = 0  # noqa: N815


@dataclass
class _FieldValue:
    fieldId: int  # noqa: N815
    scopeId: int  # noqa: N815
    timestamp: int
    latencyUsec: int  # noqa: N815
    valueType: int  # noqa: N815
    nvmlReturn: int  # noqa: N815
    value: _Value


@dataclass
class _EventData:
    device: _Handle
    eventType: int  # noqa: N815
    eventData: int  # noqa: N815
    gpuInstanceId: int  # noqa: N815
    computeInstanceId: int  # noqa: N815


@dataclass
class _EventSet:
    registered: dict[str, int] = field(default_factory=dict)  # uuid -> mask
    cursor: int = 0


def _fail(code: int) -> NVMLError:
    return NVMLError(code)


class FakeNvml:
    """One fake NVML library instance; attribute access falls back to this module's constants."""

    def __init__(self, state: NvmlState | None = None, path: Path | None = None) -> None:
        self._state = state
        self._path = path
        self._stamp: tuple[int, int] | None = None
        self._initialized = 0
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        try:
            return globals()[name]
        except KeyError:
            raise AttributeError(name) from None

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
        self._initialized += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        if not self._initialized:
            raise _fail(NVML_ERROR_UNINITIALIZED)
        self._initialized -= 1

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

    def nvmlDeviceSetMigMode(self, device: _Handle, mode: int) -> int:  # noqa: N802
        with self._lock:
            gpu = self._gpu(device, "nvmlDeviceSetMigMode", mig_ok=False)
            if not gpu.mig_capable:
                raise _fail(NVML_ERROR_NOT_SUPPORTED)
            if mode not in (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE):
                raise _fail(NVML_ERROR_INVALID_ARGUMENT)
            # Hopper applies the change at once when no process holds the GPU.
            gpu.mig_current = gpu.mig_pending = int(mode)
            if mode == NVML_DEVICE_MIG_DISABLE:
                gpu.mig_devices = []
            self._save()
        return NVML_SUCCESS

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

    # telemetry ---------------------------------------------------------------------------------
    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature", mig_ok=False)
        if sensor != NVML_TEMPERATURE_GPU:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetFieldValues(self, handle: _Handle, fieldIds: list[Any]) -> list[_FieldValue]:  # noqa: N802, N803
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues", mig_ok=False)
        values: list[_FieldValue] = []
        for entry in fieldIds:
            field_id, scope = entry if isinstance(entry, tuple) else (entry, 0)
            number: int | None = {
                NVML_FI_DEV_MEMORY_TEMP: gpu.memory_temperature_c,
                NVML_FI_DEV_POWER_AVERAGE: gpu.power_average_mw,
                NVML_FI_DEV_POWER_INSTANT: gpu.power_mw,
                NVML_FI_DEV_PCIE_REPLAY_COUNTER: gpu.pcie_replay,
                NVML_FI_DEV_NVLINK_LINK_COUNT: gpu.nvlinks_active,
            }.get(field_id)
            if field_id in (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX):
                per_link = (
                    gpu.nvlink_tx_kib_per_link
                    if field_id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
                    else (gpu.nvlink_rx_kib_per_link)
                )
                number = per_link if 0 <= scope < gpu.nvlinks_active else None
            ok = number is not None and f"field:{field_id}" not in gpu.unsupported
            values.append(
                _FieldValue(
                    fieldId=field_id,
                    scopeId=scope,
                    timestamp=time.time_ns() // 1000,
                    latencyUsec=0,
                    valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG if ok else NVML_VALUE_TYPE_UNSIGNED_INT,
                    nvmlReturn=NVML_SUCCESS if ok else NVML_ERROR_NOT_SUPPORTED,
                    value=_Value(ullVal=number if ok and number is not None else 0),
                )
            )
        return values

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetPowerUsage", mig_ok=False).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit", mig_ok=False).power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetPowerManagementLimit", mig_ok=False).power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption", mig_ok=False).energy_mj

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> _Utilization:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates", mig_ok=False)
        return _Utilization(gpu.util_gpu, gpu.util_memory)

    def nvmlDeviceGetClockInfo(self, handle: _Handle, type: int) -> int:  # noqa: N802 - pynvml's names
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo", mig_ok=False)
        if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return gpu.sm_clock_mhz
        if type == NVML_CLOCK_MEM:
            return gpu.mem_clock_mhz
        raise _fail(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetCurrPcieLinkGeneration", mig_ok=False).pcie_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetCurrPcieLinkWidth", mig_ok=False).pcie_width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetMaxPcieLinkGeneration", mig_ok=False).pcie_max_gen

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetMaxPcieLinkWidth", mig_ok=False).pcie_max_width

    def nvmlDeviceGetPcieThroughput(self, device: _Handle, counter: int) -> int:  # noqa: N802
        gpu = self._gpu(device, "nvmlDeviceGetPcieThroughput", mig_ok=False)
        return gpu.pcie_tx_kbs if counter == NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kbs

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, errorType: int, counterType: int) -> int:  # noqa: N802, N803
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors", mig_ok=False)
        return gpu.ecc_corrected if errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED else gpu.ecc_uncorrected

    def nvmlDeviceGetMemoryErrorCounter(  # noqa: N802
        self,
        handle: _Handle,
        errorType: int,  # noqa: N803
        counterType: int,  # noqa: N803
        locationType: int,  # noqa: N803
    ) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryErrorCounter", mig_ok=False)
        if locationType != NVML_MEMORY_LOCATION_DRAM:
            return 0
        return gpu.ecc_corrected if errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED else gpu.ecc_uncorrected

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons", mig_ok=False).clocks_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> int:  # noqa: N802
        return self.nvmlDeviceGetCurrentClocksEventReasons(handle)

    # interconnect ------------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, device: _Handle, link: int) -> int:  # noqa: N802
        gpu = self._gpu(device, "nvmlDeviceGetNvLinkState", mig_ok=False)
        if not 0 <= link < _HOPPER_NVLINKS:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return NVML_FEATURE_ENABLED if link < gpu.nvlinks_active else NVML_FEATURE_DISABLED

    def nvmlDeviceGetP2PStatus(self, device1: _Handle, device2: _Handle, p2pIndex: int) -> int:  # noqa: N802, N803
        a = self._gpu(device1, "nvmlDeviceGetP2PStatus", mig_ok=False)
        b = self._gpu(device2, "nvmlDeviceGetP2PStatus", mig_ok=False)
        if p2pIndex == NVML_P2P_CAPS_INDEX_NVLINK:
            linked = self._st().nvlink_p2p and a.nvlinks_active > 0 and b.nvlinks_active > 0
            return NVML_P2P_STATUS_OK if linked else NVML_P2P_STATUS_NOT_SUPPORTED
        return NVML_P2P_STATUS_OK

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: _Handle, device2: _Handle) -> int:  # noqa: N802
        a = self._gpu(device1, "nvmlDeviceGetTopologyCommonAncestor", mig_ok=False)
        b = self._gpu(device2, "nvmlDeviceGetTopologyCommonAncestor", mig_ok=False)
        return NVML_TOPOLOGY_NODE if a.numa_node == b.numa_node else NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetGpuFabricInfo(self, device: _Handle, gpuFabricInfo: Any) -> int:  # noqa: N802, N803
        self._gpu(device, "nvmlDeviceGetGpuFabricInfo", mig_ok=False)
        # HGX H100 boards are not fabric-attached (no IMEX clique).
        raise _fail(NVML_ERROR_NOT_SUPPORTED)

    # events ------------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> _EventSet:  # noqa: N802
        state = self._st()
        return _EventSet(cursor=max((e.seq for e in state.events), default=0))

    def nvmlDeviceGetSupportedEventTypes(self, handle: _Handle) -> int:  # noqa: N802
        self._gpu(handle, "nvmlDeviceGetSupportedEventTypes", mig_ok=False)
        return _SUPPORTED_EVENTS

    def nvmlDeviceRegisterEvents(self, handle: _Handle, eventTypes: int, eventSet: _EventSet) -> None:  # noqa: N802, N803
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents", mig_ok=False)
        if eventTypes & ~_SUPPORTED_EVENTS:
            raise _fail(NVML_ERROR_NOT_SUPPORTED)
        eventSet.registered[gpu.uuid] = eventSet.registered.get(gpu.uuid, 0) | int(eventTypes)

    def nvmlEventSetWait(self, eventSet: _EventSet, timeoutms: int) -> _EventData:  # noqa: N802, N803
        deadline = time.monotonic() + max(int(timeoutms), 0) / 1000.0
        while True:
            state = self._st()
            for event in state.events:
                if event.seq <= eventSet.cursor:
                    continue
                eventSet.cursor = event.seq
                mask = eventSet.registered.get(event.uuid, 0)
                if not mask & nvmlEventTypeXidCriticalError:
                    continue
                index = next(i for i, g in enumerate(state.gpus) if g.uuid == event.uuid)
                return _EventData(
                    _Handle(index),
                    nvmlEventTypeXidCriticalError,
                    event.xid,
                    event.gpu_instance_id,
                    event.compute_instance_id,
                )
            if time.monotonic() >= deadline:
                raise _fail(NVML_ERROR_TIMEOUT)
            time.sleep(0.05)  # a blocking wait in the real library; poll the state file meanwhile

    def nvmlEventSetWait_v2(self, eventSet: _EventSet, timeoutms: int) -> _EventData:  # noqa: N802, N803
        return self.nvmlEventSetWait(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: _EventSet) -> None:  # noqa: N802, N803
        eventSet.registered.clear()


_default_lock = threading.Lock()
_default: FakeNvml | None = None


def _module_instance() -> FakeNvml:
    """The instance behind the module-level functions, bound to the file in GPUOP_FAKE_NVML_STATE."""
    global _default
    with _default_lock:
        path_text = os.environ.get(STATE_ENV, "")
        path = Path(path_text) if path_text else None
        if _default is None or _default._path != path:
            _default = FakeNvml(path=path) if path is not None else FakeNvml(state=None)
        return _default


def _delegate(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(_module_instance(), name)(*args, **kwargs)

    call.__name__ = name
    return call


for _name in [n for n in vars(FakeNvml) if n.startswith("nvml")]:
    globals()[_name] = _delegate(_name)
