"""The interface every GPU backend implements (device plugin, labeller, exporter, config manager)."""

from __future__ import annotations

import abc
from collections.abc import Iterable

from gpuop_common.gpu.errors import GpuNotFoundError
from gpuop_common.gpu.models import GpuDevice, GpuHealth, GpuTelemetry, PartitionState, Vendor


class GpuBackend(abc.ABC):
    """Reads (and for partitioning, writes) the GPUs of one vendor on one node.

    Contract shared by both vendors:
    - `enumerate()` returns the physical GPUs, sorted by index; bad or missing driver files make a
      field `None` (and a log line naming the file), never an exception.
    - `health()` compares the node against the baseline taken at the first call (or the last
      `reset_health()`); GPUs that vanished since then are still reported, as unhealthy.
    - `telemetry()` never raises for a reading: unreadable values are omitted and listed in
      `GpuTelemetry.errors`.
    """

    vendor: Vendor

    @abc.abstractmethod
    def enumerate(self) -> list[GpuDevice]: ...

    @abc.abstractmethod
    def health(self) -> list[GpuHealth]: ...

    @abc.abstractmethod
    def reset_health(self) -> None:
        """Forget sticky failures (XIDs) and re-take the baseline (e.g. after a GPU reset)."""

    @abc.abstractmethod
    def telemetry(self) -> list[GpuTelemetry]: ...

    @abc.abstractmethod
    def get_partition_mode(self, gpu_id: str) -> PartitionState: ...

    @abc.abstractmethod
    def set_partition_mode(self, gpu_id: str, mode: str) -> PartitionState:
        """Set a compute and/or memory mode (AMD `CPX`, `NPS4`, `cpx_nps4`; NVIDIA `mig`/`none`).

        Raises InvalidPartitionModeError naming the mode and the allowed ones,
        PartitionNotSupportedError when the GPU cannot be partitioned at all.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Release driver handles; the default has nothing to release."""

    def find(self, gpu_id: str, devices: Iterable[GpuDevice] | None = None) -> GpuDevice:
        """The GPU with this unique id, PCI address or index (as a string)."""
        for gpu in self.enumerate() if devices is None else devices:
            if gpu_id in (gpu.id, gpu.pci_address, str(gpu.index)):
                return gpu
        raise GpuNotFoundError(gpu_id)

    def __enter__(self) -> GpuBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
