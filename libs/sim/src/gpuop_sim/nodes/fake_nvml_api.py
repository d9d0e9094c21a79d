"""Constants, error classes and result structs of the fake NVML, with pynvml's names and values.

Split from `fake_nvml` (which re-exports all of it) only to keep modules short.
"""

# pynvml's public names are camelCase (nvmlEventTypeXidCriticalError, ...); the fake keeps them.
# ruff: noqa: N816

from __future__ import annotations

import string
import sys
from dataclasses import dataclass, field
from typing import Any

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
NVML_ERROR_IN_USE = 19
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
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
NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0
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
    NVML_ERROR_IN_USE: "In use by another client",
    NVML_ERROR_INSUFFICIENT_RESOURCES: "Insufficient resources",
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


@dataclass(frozen=True)
class _GpuInstance:
    index: int
    gi_id: int


@dataclass(frozen=True)
class _ComputeInstance:
    index: int
    gi_id: int
    ci_id: int


@dataclass
class c_nvmlGpuInstancePlacement_t:  # noqa: N801 - pynvml's name
    start: int = 0
    size: int = 0


_Placement = c_nvmlGpuInstancePlacement_t


@dataclass
class _GpuInstanceProfileInfo:
    version: int
    id: int
    isP2pSupported: int  # noqa: N815
    sliceCount: int  # noqa: N815
    instanceCount: int  # noqa: N815
    multiprocessorCount: int  # noqa: N815
    copyEngineCount: int  # noqa: N815
    decoderCount: int  # noqa: N815
    encoderCount: int  # noqa: N815
    jpegCount: int  # noqa: N815
    ofaCount: int  # noqa: N815
    memorySizeMB: int  # noqa: N815
    name: bytes


@dataclass
class _GpuInstanceInfo:
    device: Any
    id: int
    profileId: int  # noqa: N815
    placement: _Placement


@dataclass
class _ComputeInstanceProfileInfo:
    version: int
    id: int
    sliceCount: int  # noqa: N815
    instanceCount: int  # noqa: N815
    multiprocessorCount: int  # noqa: N815
    sharedCopyEngineCount: int  # noqa: N815
    sharedDecoderCount: int  # noqa: N815
    sharedEncoderCount: int  # noqa: N815
    sharedJpegCount: int  # noqa: N815
    sharedOfaCount: int  # noqa: N815
    name: bytes


@dataclass
class _ComputeInstanceInfo:
    device: Any
    gpuInstance: Any  # noqa: N815
    id: int
    profileId: int  # noqa: N815
    placement: _Placement


def _fail(code: int) -> NVMLError:
    return NVMLError(code)
