"""Typed errors of the GPU backends; every one names what failed so logs and events can say why."""

from __future__ import annotations


class GpuBackendError(Exception):
    """Base class of every error a GPU backend raises."""


class SysfsReadError(GpuBackendError):
    """A sysfs file could not be read or parsed; `kind` is a FieldErrorKind value."""

    def __init__(self, path: str, kind: str, detail: str = "") -> None:
        self.path = path
        self.kind = kind
        self.detail = detail
        super().__init__(f"{path}: {kind}{': ' + detail if detail else ''}")


class GpuNotFoundError(GpuBackendError):
    def __init__(self, gpu_id: str) -> None:
        self.gpu_id = gpu_id
        super().__init__(f"no GPU with id {gpu_id!r} on this node")


class PartitionNotSupportedError(GpuBackendError):
    def __init__(self, gpu_id: str, what: str) -> None:
        self.gpu_id = gpu_id
        super().__init__(f"GPU {gpu_id}: {what} partitioning is not supported")


class InvalidPartitionModeError(GpuBackendError):
    def __init__(self, gpu_id: str, mode: str, allowed: tuple[str, ...]) -> None:
        self.gpu_id = gpu_id
        self.mode = mode
        self.allowed = allowed
        allowed_text = ", ".join(allowed) if allowed else "none"
        super().__init__(f"GPU {gpu_id}: partition mode {mode!r} is not allowed (allowed: {allowed_text})")


class PartitionRefusedError(GpuBackendError):
    """The modes exist on the GPU but not together (or not from its current state); `reason` says why."""

    def __init__(self, gpu_id: str, reason: str) -> None:
        self.gpu_id = gpu_id
        self.reason = reason
        super().__init__(f"GPU {gpu_id}: {reason}")


class PartitionWriteError(GpuBackendError):
    """The driver refused a write; `errno_name` is e.g. EBUSY or EINVAL when it came as an errno."""

    def __init__(self, gpu_id: str, target: str, detail: str, errno_name: str | None = None) -> None:
        self.gpu_id = gpu_id
        self.target = target
        self.detail = detail
        self.errno_name = errno_name
        super().__init__(f"GPU {gpu_id}: setting partition mode via {target} failed: {detail}")


class NvmlUnavailableError(GpuBackendError):
    """NVML could not be used for a reason other than "no NVIDIA driver on this node"."""
