"""Any content in any sysfs file the AMD backend reads: no exception out of the backend."""

from __future__ import annotations

import pytest
from gpuop_common.gpu import AmdSysfsBackend
from gpuop_sim.nodes import build_node_root
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

DEVICE_FILES = [
    "vendor", "device", "subsystem_vendor", "revision", "unique_id", "numa_node", "mem_info_vram_total",
    "mem_info_vram_used", "gpu_busy_percent", "pp_dpm_sclk", "pp_dpm_mclk", "current_link_speed",
    "current_link_width", "pcie_replay_count", "current_compute_partition", "available_compute_partition",
    "available_memory_partition", "ras/umc_err_count", "hwmon/hwmon2/name", "hwmon/hwmon2/temp2_label",
    "hwmon/hwmon2/temp2_input", "hwmon/hwmon2/power1_input", "vbios_version",
]  # fmt: skip
KFD_FILES = ["nodes/2/properties", "nodes/3/io_links/1/properties", "nodes/0/properties", "generation_id"]


@pytest.fixture(scope="module")
def cpx_root(tmp_path_factory):
    return build_node_root("amd-mi300x-cpx", tmp_path_factory.mktemp("fuzz") / "root")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    target=st.sampled_from([("dev", f) for f in DEVICE_FILES] + [("kfd", f) for f in KFD_FILES]),
    content=st.one_of(st.binary(max_size=64), st.text(max_size=64).map(str.encode)),
)
def test_any_file_content_is_survived(cpx_root, target, content):
    kind, rel = target
    base = (
        (cpx_root.root / "sys/bus/pci/devices/0000:05:00.0").resolve()
        if kind == "dev"
        else cpx_root.root / "sys/class/kfd/kfd/topology"
    )
    path = base / rel
    original = path.read_bytes()
    try:
        path.write_bytes(content)
        backend = AmdSysfsBackend(cpx_root.root)
        gpus = backend.enumerate()
        assert len(gpus) >= 7  # one GPU may lose its KFD facts, never the others
        readings = backend.telemetry()
        assert len(readings) == len(gpus)
        backend.health()
    finally:
        path.write_bytes(original)
