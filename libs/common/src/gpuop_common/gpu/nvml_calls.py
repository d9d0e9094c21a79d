"""Thin helpers over an injected pynvml-shaped module: error mapping, strings, field values.

The module object is whatever `pynvml` (nvidia-ml-py) or a pynvml-shaped fake provides; only names
that the real library defines are used, with the real call signatures.
"""

from __future__ import annotations

import importlib
import math
import os
import re
from collections.abc import Callable
from typing import Any

from gpuop_common.gpu.models import FieldError, FieldErrorKind

NVML_MODULE_ENV = "GPUOP_NVML_MODULE"
DEFAULT_NVML_MODULE = "pynvml"

# NVML return codes (nvml.h); the module's constants are used when present, these only as fallback.
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_DRIVER_NOT_LOADED = 9
ERROR_TIMEOUT = 10
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
ERROR_GPU_IS_LOST = 15
NO_DRIVER_CODES = frozenset({ERROR_LIBRARY_NOT_FOUND, ERROR_DRIVER_NOT_LOADED})

# Value types of nvmlFieldValue_t -> the union member holding the value.
_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}

# nvmlClocksEventReason* bits (same values as the older ThrottleReason names).
THROTTLE_REASONS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

# GFD family names by CUDA compute capability major (8.9 is Ada, 7.5 Turing).
_FAMILIES = {1: "tesla", 2: "fermi", 3: "kepler", 5: "maxwell", 6: "pascal", 7: "volta", 8: "ampere"}
_FAMILIES |= {9: "hopper", 10: "blackwell", 12: "blackwell", 13: "rubin"}
_ARCHITECTURES = {2: "kepler", 3: "maxwell", 4: "pascal", 5: "volta", 6: "turing", 7: "ampere"}
_ARCHITECTURES |= {8: "ada-lovelace", 9: "hopper", 10: "blackwell", 13: "rubin"}
_MIG_NAME = re.compile(r"MIG\s+(\S+)$")


def load_nvml(module: Any | None) -> Any:
    """The injected module, else the one GPUOP_NVML_MODULE names (default pynvml); may raise ImportError."""
    if module is not None:
        return module
    return importlib.import_module(os.environ.get(NVML_MODULE_ENV, DEFAULT_NVML_MODULE))


def error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def text(value: Any) -> str:
    """NVML strings arrive as str (convertStrBytes) or bytes (struct char arrays)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return str(value)


def normalize_bus_id(bus_id: Any) -> str:
    """NVML `00000000:18:00.0` -> sysfs style `0000:18:00.0`, lower-case."""
    raw = text(bus_id).strip().lower()
    domain, _, rest = raw.partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest else raw


def family_for(major: int, minor: int) -> str:
    if major == 8 and minor == 9:
        return "ada-lovelace"
    if major == 7 and minor == 5:
        return "turing"
    return _FAMILIES.get(major, "undefined")


def architecture_name(arch: int) -> str | None:
    return _ARCHITECTURES.get(arch)


def cuda_version(encoded: int) -> str:
    """nvmlSystemGetCudaDriverVersion: 12040 -> `12.4`."""
    return f"{encoded // 1000}.{(encoded % 1000) // 10}"


def mig_profile(name: str, attributes: Any | None) -> str | None:
    """`1g.10gb` from the MIG device attributes (`<c>c.` prefix when CI and GI slices differ)."""
    if attributes is not None:
        gi = int(attributes.gpuInstanceSliceCount)
        ci = int(attributes.computeInstanceSliceCount)
        gb = math.ceil(int(attributes.memorySizeMB) / 1024)
        prefix = f"{ci}c." if ci != gi else ""
        return f"{prefix}{gi}g.{gb}gb"
    match = _MIG_NAME.search(name)
    return match.group(1) if match else None


def throttle_names(mask: int) -> tuple[str, ...]:
    return tuple(name for bit, name in THROTTLE_REASONS.items() if mask & bit)


def field_value(value: Any) -> float | int | None:
    """The number in one nvmlFieldValue_t, or None when its own nvmlReturn is an error."""
    if int(getattr(value, "nvmlReturn", 0)) != 0:
        return None
    member = _VALUE_MEMBERS.get(int(value.valueType))
    if member is None:
        return None
    number = getattr(value.value, member)
    return float(number) if member == "dVal" else int(number)


class NvmlFieldReader:
    """Calls NVML for one GPU's telemetry; NVMLError -> FieldError, never a raise."""

    def __init__(self, nvml: Any, gpu_id: str) -> None:
        self.nvml = nvml
        self.gpu_id = gpu_id
        self.errors: list[FieldError] = []

    def call(self, field: str, fn_name: str, *args: Any) -> Any | None:
        fn: Callable[..., Any] | None = getattr(self.nvml, fn_name, None)
        if fn is None:
            self.fail(field, FieldErrorKind.NOT_SUPPORTED, fn_name, "not in this NVML binding")
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            code = error_code(exc)
            kind = (
                FieldErrorKind.NOT_SUPPORTED
                if code in (ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND)
                else FieldErrorKind.FAILED
            )
            self.fail(field, kind, fn_name, str(exc))
            return None

    def fail(self, field: str, kind: FieldErrorKind, source: str, detail: str = "") -> None:
        self.errors.append(FieldError(self.gpu_id, field, kind, source, detail))
