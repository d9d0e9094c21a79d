"""GPU backends: one interface over AMD (amdgpu sysfs + KFD) and NVIDIA (NVML).

from gpuop_common.gpu import open_backends
for backend in open_backends("/host"):
    gpus = backend.enumerate()
"""

from gpuop_common.gpu.amd import AmdSysfsBackend
from gpuop_common.gpu.base import GpuBackend
from gpuop_common.gpu.detect import detect_vendors, open_backends
from gpuop_common.gpu.errors import (
    GpuBackendError,
    GpuNotFoundError,
    InvalidPartitionModeError,
    NvmlUnavailableError,
    PartitionNotSupportedError,
    PartitionRefusedError,
    PartitionWriteError,
    SysfsReadError,
)
from gpuop_common.gpu.models import (
    ComputePartition,
    EccCounts,
    FieldError,
    FieldErrorKind,
    GpuDevice,
    GpuHealth,
    GpuLink,
    GpuTelemetry,
    HealthReason,
    LinkType,
    MigDevice,
    PartitionHealth,
    PartitionState,
    PcieReading,
    PciIds,
    TempSensor,
    Vendor,
)
from gpuop_common.gpu.nvidia import DEFAULT_IGNORED_XIDS, NvmlBackend

__all__ = [
    "DEFAULT_IGNORED_XIDS",
    "AmdSysfsBackend",
    "ComputePartition",
    "EccCounts",
    "FieldError",
    "FieldErrorKind",
    "GpuBackend",
    "GpuBackendError",
    "GpuDevice",
    "GpuHealth",
    "GpuLink",
    "GpuNotFoundError",
    "GpuTelemetry",
    "HealthReason",
    "InvalidPartitionModeError",
    "LinkType",
    "MigDevice",
    "NvmlBackend",
    "NvmlUnavailableError",
    "PartitionHealth",
    "PartitionNotSupportedError",
    "PartitionRefusedError",
    "PartitionState",
    "PartitionWriteError",
    "PciIds",
    "PcieReading",
    "SysfsReadError",
    "TempSensor",
    "Vendor",
    "detect_vendors",
    "open_backends",
]
