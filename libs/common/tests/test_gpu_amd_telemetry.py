"""AMD telemetry equals the sysfs files of the node root; bad files become per-field errors."""

from __future__ import annotations

import logging
import shutil

from gpuop_common.gpu import AmdSysfsBackend, FieldErrorKind, TempSensor
from gpuop_sim.nodes import remove_file, set_garbage, set_temperature


def _dev(info, bdf):
    return (info.root / "sys/bus/pci/devices" / bdf).resolve()


def _hwmon(device_dir):
    return next(device_dir.glob("hwmon/hwmon*"))


def _int(path):
    return int(path.read_text())


def test_mi210_telemetry_equals_fixture_files(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    readings = AmdSysfsBackend(info.root).telemetry()
    assert len(readings) == 8
    for bdf, reading in zip(info.pci_addresses, readings, strict=True):
        ddir = _dev(info, bdf)
        hw = _hwmon(ddir)
        assert reading.temperatures_c == {
            TempSensor.EDGE: _int(hw / "temp1_input") / 1000,
            TempSensor.JUNCTION: _int(hw / "temp2_input") / 1000,
            TempSensor.MEMORY: _int(hw / "temp3_input") / 1000,
        }
        assert reading.power_average_w == _int(hw / "power1_average") / 1e6
        assert reading.power_cap_w == _int(hw / "power1_cap") / 1e6
        assert reading.gpu_util_percent == _int(ddir / "gpu_busy_percent")
        assert reading.memory_util_percent == _int(ddir / "mem_busy_percent")
        assert reading.vram_total_bytes == _int(ddir / "mem_info_vram_total")
        assert reading.vram_used_bytes == _int(ddir / "mem_info_vram_used")
        assert reading.vram_free_bytes == reading.vram_total_bytes - reading.vram_used_bytes
        assert reading.shader_clock_mhz == 800.0  # the starred pp_dpm_sclk level
        assert reading.memory_clock_mhz == 1600.0
        assert (reading.pcie.current_gen, reading.pcie.current_width) == (4, 16)
        received, sent, mps = map(int, (ddir / "pcie_bw").read_text().split())
        assert (reading.pcie.rx_bytes_per_s, reading.pcie.tx_bytes_per_s) == (received * mps, sent * mps)
        assert set(reading.ecc) == {"umc", "sdma", "gfx", "mmhub", "pcie_bif", "hdp", "xgmi_wafl"}
        assert reading.link_count == 3  # XGMI peers in the 4-GPU hive
        # MI210 has power1_average but no power1_input, and amdgpu has no hwmon energy counter.
        missing = {e.field for e in reading.errors if e.kind is FieldErrorKind.MISSING}
        assert missing == {"power.current", "energy"}


def test_mi300x_reports_its_asymmetries_as_missing_fields(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    reading = AmdSysfsBackend(info.root).telemetry()[0]
    hw = _hwmon(_dev(info, info.pci_addresses[0]))
    assert TempSensor.EDGE not in reading.temperatures_c
    assert reading.temperatures_c[TempSensor.JUNCTION] == _int(hw / "temp2_input") / 1000
    assert reading.power_w == _int(hw / "power1_input") / 1e6
    assert reading.power_average_w is None
    fields = {e.field for e in reading.errors}
    assert {"temperature.edge", "power.average", "pcie.bandwidth"} <= fields
    assert reading.link_count == 7


def test_garbage_value_is_a_field_error_naming_the_file(gpu_node_root, caplog):
    info = gpu_node_root("amd-mi210x8")
    bdf = info.pci_addresses[0]
    path = set_garbage(info.root, f"sys/bus/pci/devices/{bdf}/gpu_busy_percent", "busy!\n")
    with caplog.at_level(logging.WARNING):
        reading = AmdSysfsBackend(info.root).telemetry()[0]
    assert reading.gpu_util_percent is None
    error = next(e for e in reading.errors if e.field == "gpu_util")
    assert error.kind is FieldErrorKind.INVALID
    assert error.source.endswith("gpu_busy_percent")
    assert any("gpu_busy_percent" in r.getMessage() for r in caplog.records)
    assert path.name == "gpu_busy_percent"
    assert reading.vram_total_bytes is not None  # other readings still there


def test_missing_empty_and_unreadable_files(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    ddir = _dev(info, info.pci_addresses[1])
    remove_file(info.root, f"sys/bus/pci/devices/{info.pci_addresses[1]}/mem_info_vram_used")
    (ddir / "pp_dpm_sclk").write_text("")
    # A directory where a file should be fails the read like EISDIR/EIO from a driver.
    (ddir / "mem_busy_percent").unlink()
    (ddir / "mem_busy_percent").mkdir()
    (ddir / "ras/umc_err_count").write_text("Query currently inaccessible\n")
    reading = AmdSysfsBackend(info.root).telemetry()[1]
    kinds = {e.field: e.kind for e in reading.errors}
    assert kinds["vram.used"] is FieldErrorKind.MISSING
    assert kinds["clock.shader"] is FieldErrorKind.INVALID
    assert kinds["memory_util"] is FieldErrorKind.UNREADABLE
    assert kinds["ecc.umc"] is FieldErrorKind.INVALID
    assert reading.vram_used_bytes is None and reading.vram_free_bytes is None
    assert "umc" not in reading.ecc and "gfx" in reading.ecc


def test_set_temperature_shows_in_telemetry(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    set_temperature(info.root, info.pci_addresses[2], 97.5, sensor="junction")
    reading = AmdSysfsBackend(info.root).telemetry()[2]
    assert reading.temperatures_c[TempSensor.JUNCTION] == 97.5


def test_hwmon_dir_gone_is_one_error_not_a_crash(gpu_node_root):
    info = gpu_node_root("amd-radeon")
    shutil.rmtree(_dev(info, info.pci_addresses[0]) / "hwmon")
    reading = AmdSysfsBackend(info.root).telemetry()[0]
    assert reading.temperatures_c == {} and reading.power_w is None
    assert any(e.field == "hwmon" and e.kind is FieldErrorKind.MISSING for e in reading.errors)
    assert reading.vram_total_bytes == 48 * 1024**3


def test_hwmon_that_is_not_a_directory_is_reported(gpu_node_root, caplog):
    info = gpu_node_root("amd-mi210x8")
    hwmon = _dev(info, info.pci_addresses[0]) / "hwmon"
    shutil.rmtree(hwmon)
    hwmon.write_text("not a dir\n")
    with caplog.at_level(logging.WARNING):
        reading = AmdSysfsBackend(info.root).telemetry()[0]
    assert any(e.field == "hwmon" for e in reading.errors)
    assert any("hwmon" in r.getMessage() for r in caplog.records)
