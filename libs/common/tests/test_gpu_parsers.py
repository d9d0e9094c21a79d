"""Pure parsers for the sysfs formats of amdgpu-sysfs.md."""

from __future__ import annotations

import pytest
from gpuop_common.gpu import amd_ids
from gpuop_common.gpu.amd import split_mode
from gpuop_common.gpu.amd_topology import bdf_from_location
from gpuop_common.gpu.nvml_calls import cuda_version, mig_profile, normalize_bus_id, throttle_names
from gpuop_common.gpu.sysfs import (
    parse_dpm,
    parse_link_speed,
    parse_mode_list,
    parse_pcie_bw,
    parse_properties,
    parse_ras_count,
)


def test_dpm_current_level_and_deep_sleep():
    assert parse_dpm("0: 500Mhz \n1: 800Mhz *\n2: 1700Mhz ").current_mhz == 800
    mi300 = parse_dpm("S: 19Mhz *\n0: 500Mhz \n1: 2100Mhz ")
    assert mi300.current_mhz == 19 and mi300.levels_mhz == (500, 2100)
    with pytest.raises(ValueError, match="unavailable"):
        parse_dpm("unavailable")
    with pytest.raises(ValueError):
        parse_dpm("0: fast")


def test_link_speed_and_gen():
    assert parse_link_speed("32.0 GT/s PCIe") == (32.0, 5)
    assert parse_link_speed("8.0 GT/s") == (8.0, 3)
    with pytest.raises(ValueError):
        parse_link_speed("Unknown")


def test_ras_counts_with_deferred():
    assert parse_ras_count("ue: 1\nce: 7\nde: 2") == {"ue": 1, "ce": 7, "de": 2}
    with pytest.raises(ValueError):
        parse_ras_count("Query currently inaccessible")


def test_properties_and_pcie_bw_and_modes():
    assert parse_properties("simd_count 416\nhive_id 12609507387757274807\n") == {
        "simd_count": 416,
        "hive_id": 12609507387757274807,
    }
    with pytest.raises(ValueError, match="line 1"):
        parse_properties("simd_count\n")
    assert parse_pcie_bw("10 20 256") == (10, 20, 256)
    assert parse_mode_list("SPX, DPX, QPX, CPX") == ("SPX", "DPX", "QPX", "CPX")
    assert parse_mode_list("Not supported") == ()


def test_location_id_to_bdf():
    assert bdf_from_location(0, 1280) == "0000:05:00.0"
    assert bdf_from_location(0, 1287) == "0000:05:00.7"
    assert bdf_from_location(1, 25344) == "0001:63:00.0"


def test_gfx_names_and_families():
    assert amd_ids.gfx_name(90010) == "gfx90a"
    assert amd_ids.gfx_name(90402) == "gfx942"
    assert amd_ids.gfx_name(110000) == "gfx1100"
    assert amd_ids.family_name(90402) == "AI"
    assert amd_ids.family_name(110000) == "GC_11_0_0"
    assert amd_ids.marketing_name(0x74A1) == "AMD Instinct MI300X"
    assert amd_ids.marketing_name(0x1234) == "AMD GPU 0x1234"


def test_partition_mode_strings():
    assert split_mode("cpx_nps4") == ("CPX", "NPS4")
    assert split_mode("SPX") == ("SPX", None)
    assert split_mode("NPS1") == (None, "NPS1")


def test_nvml_helpers():
    assert normalize_bus_id(b"00000000:18:00.0") == "0000:18:00.0"
    assert cuda_version(12040) == "12.4"
    assert mig_profile("NVIDIA H100 80GB HBM3 MIG 3g.40gb", None) == "3g.40gb"
    assert throttle_names(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
