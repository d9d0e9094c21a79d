"""Reading every backend at once: a failing backend is left out and named, the others still count."""

from __future__ import annotations

from typing import Any

from gpuop_common.gpu import GpuBackendError, Vendor
from gpuop_common.gpu.changes import enumerate_all, health_all


class Backend:
    def __init__(self, vendor: Vendor, fails: bool) -> None:
        self.vendor, self.fails = vendor, fails

    def enumerate(self) -> list[Any]:
        if self.fails:
            raise GpuBackendError("NVML: driver not loaded")
        return [f"{self.vendor.value}-gpu"]

    def health(self) -> list[Any]:
        if self.fails:
            raise OSError(5, "Input/output error")
        return [f"{self.vendor.value}-health"]


def test_a_failing_backend_is_left_out_and_its_vendor_named() -> None:
    backends: list[Any] = [Backend(Vendor.AMD, fails=False), Backend(Vendor.NVIDIA, fails=True)]
    assert enumerate_all(backends) == ["amd-gpu"]
    assert health_all(backends) == (["amd-health"], {"nvidia"})
