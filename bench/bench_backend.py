"""GPU backend cost: enumerate() and telemetry() on the MI300X CPX root and the H100x8 fake NVML.

These are the calls the device plugin, labeller and exporter make every poll; the CPX root is the
largest real topology we have (63 KFD partition nodes, ~4000 sysfs files).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuop_common.gpu import AmdSysfsBackend, GpuBackend, NvmlBackend
from gpuop_sim.nodes import build_node_root
from gpuop_sim.nodes.fake_nvml import FakeNvml

RUNS = 21


def _median_ms(call: Callable[[], object], runs: int) -> float:
    call()  # warm the page cache and imports
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(samples)


def _rows(label: str, backend: GpuBackend, runs: int, notes: str) -> list[dict[str, Any]]:
    gpus = len(backend.enumerate())
    return [
        {
            "name": f"{label} enumerate()",
            "value": _median_ms(backend.enumerate, runs),
            "unit": "ms",
            "notes": f"median of {runs}; {gpus} GPUs; {notes}",
        },
        {
            "name": f"{label} telemetry()",
            "value": _median_ms(backend.telemetry, runs),
            "unit": "ms",
            "notes": f"median of {runs}; {gpus} GPUs; {notes}",
        },
    ]


def run(runs: int = RUNS) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-backend-") as tmp:
        amd = build_node_root("amd-mi300x-cpx", Path(tmp) / "amd")
        notes = "63 KFD partition nodes, KFD parse cached by generation_id"
        rows = _rows("AMD MI300X CPX sysfs", AmdSysfsBackend(amd.root), runs, notes)
        rows.append(
            {
                "name": "AMD MI300X CPX sysfs enumerate() cold",
                "value": _median_ms(lambda: AmdSysfsBackend(amd.root).enumerate(), runs),
                "unit": "ms",
                "notes": f"median of {runs}; new backend each call, so KFD is parsed every time",
            }
        )
        nvidia = build_node_root("nvidia-h100x8", Path(tmp) / "nvidia")
        backend = NvmlBackend(FakeNvml(path=nvidia.nvml_state_path), nvidia.root)
        rows += _rows("NVIDIA H100x8 fake NVML", backend, runs, "fake NVML in-process, state file cached")
        backend.close()
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<40} {row['value']:>9.2f} {row['unit']}  {row['notes']}")
