"""Exact series per simulated node profile: names, values and identity labels as dashboards see them.

Expected values come from the simulated boards (gpuop_sim.nodes.boards): e.g. MI300X junction 45 C +
1 C per GPU index, H100 power 70 W + 1 W per index.
"""

from __future__ import annotations

import pytest
from gpuop_common.config import MetricsExporterConfig

MIB = 1024**2
GIB = 1024**3


def test_mi300x_cpx_amd_names_put_device_readings_on_partition_zero(exporter_for):
    scrape = exporter_for("amd-mi300x-cpx").scrape()
    gpu0 = {"gpu_id": "0", "gpu_partition_id": "0"}
    labels = scrape.find("gpu_junction_temperature", **gpu0)[0].labels
    assert labels == {
        "gpu_id": "0",
        "gpu_partition_id": "0",
        "gpu_compute_partition_type": "cpx",
        "gpu_memory_partition_type": "nps4",
        "serial_number": "6922510010000",
        "card_model": "AMD Instinct MI300X",
        "gpu_uuid": "e3aa140f9a5f9e31",
        "pci_bus_id": "0000:05:00.0",
        "hostname": "node-a",
        "deployment_mode": "baremetal",
        "pod": "",
        "namespace": "",
        "container": "",
        "job_id": "",
        "job_user": "",
        "job_partition": "",
    }
    assert scrape.value("gpu_junction_temperature", **gpu0) == 45.0
    assert scrape.value("gpu_memory_temperature", **gpu0) == 40.0
    # The second physical GPU starts at logical id 8 (8 CPX partitions per MI300X).
    assert scrape.value("gpu_junction_temperature", gpu_id="8", gpu_partition_id="0") == 46.0
    assert scrape.value("gpu_package_power", **gpu0) == 150.0
    assert scrape.value("gpu_power_usage", **gpu0) == 150.0
    assert scrape.value("gpu_gfx_activity", **gpu0) == 20.0
    assert scrape.value("gpu_umc_activity", **gpu0) == 5.0
    assert scrape.value("gpu_total_vram", **gpu0) == 192 * 1024
    assert scrape.value("gpu_used_vram", **gpu0) == 300
    assert scrape.value("gpu_free_vram", **gpu0) == 192 * 1024 - 300
    assert scrape.value("gpu_clock", clock_type="GPU_CLOCK_TYPE_SYSTEM", clock_index="0", **gpu0) == 1300
    assert scrape.value("gpu_clock", clock_type="GPU_CLOCK_TYPE_MEMORY", **gpu0) == 1300
    assert scrape.value("pcie_speed", **gpu0) == 32.0
    assert scrape.value("pcie_max_speed", **gpu0) == 32.0
    assert scrape.value("pcie_replay_count", **gpu0) == 0
    assert scrape.value("gpu_ecc_uncorrect_umc", **gpu0) == 0
    assert scrape.value("gpu_ecc_correct_bif", **gpu0) == 0  # sysfs pcie_bif, exporter's `bif`
    assert scrape.value("gpu_ecc_uncorrect_total", **gpu0) == 0
    assert scrape.value("gpu_health", **gpu0) == 1.0
    # Partitions other than 0 carry their own health, not device-wide readings.
    assert scrape.value("gpu_health", gpu_id="3", gpu_partition_id="3") == 1.0
    assert scrape.find("gpu_junction_temperature", gpu_partition_id="3") == []
    assert len(scrape.named("gpu_health")) == 63  # the capture's last GPU has 7 partitions
    assert scrape.value("gpu_nodes_total", hostname="node-a") == 63
    # MI300X has no edge sensor: no series, and the missing reading is counted.
    assert scrape.named("gpu_edge_temperature") == []
    assert scrape.value("gpuop_exporter_read_errors_total", uuid="e3aa140f9a5f9e31",
                        field="temperature.edge", kind="missing") == 1  # fmt: skip
    assert not any(name.startswith("DCGM_") for name in scrape.names())


def test_mi300x_cpx_neutral_names_in_base_units(exporter_for):
    scrape = exporter_for("amd-mi300x-cpx").scrape()
    gpu0 = {"gpu": "0", "partition": "0", "partition_id": "0000:05:00.0"}
    labels = scrape.find("gpuop_gpu_power_watts", **gpu0)[0].labels
    assert labels == {
        **gpu0,
        "uuid": "e3aa140f9a5f9e31",
        "serial": "6922510010000",
        "pci_bus_id": "0000:05:00.0",
        "model": "AMD Instinct MI300X",
        "vendor": "amd",
        "hostname": "node-a",
        "pod": "",
        "namespace": "",
        "container": "",
    }
    assert scrape.value("gpuop_gpu_power_watts", **gpu0) == 150.0
    assert scrape.value("gpuop_gpu_power_limit_watts", **gpu0) == 750.0
    assert scrape.value("gpuop_gpu_temperature_celsius", sensor="junction", **gpu0) == 45.0
    assert scrape.value("gpuop_gpu_utilization_ratio", **gpu0) == pytest.approx(0.20)
    assert scrape.value("gpuop_gpu_memory_total_bytes", **gpu0) == 192 * GIB
    assert scrape.value("gpuop_gpu_clock_hertz", clock="shader", **gpu0) == 1.3e9
    assert scrape.value("gpuop_gpu_pcie_link_speed_transfers_per_second", **gpu0) == 32e9
    assert scrape.value("gpuop_gpu_pcie_link_width_lanes", **gpu0) == 16
    assert scrape.value("gpuop_gpu_active_links", link_type="xgmi", **gpu0) == 7
    assert (
        scrape.value("gpuop_gpu_ecc_block_errors_total", block="umc", severity="uncorrectable", **gpu0) == 0
    )
    assert scrape.value("gpuop_gpu_partition_memory_bytes", gpu="0", partition="3") == 24 * GIB
    assert scrape.value("gpuop_gpu_compute_units", gpu="0", partition="3") == 38
    assert scrape.value("gpuop_gpu_health", gpu="0", partition="5", partition_id="amdgpu_xcp_4") == 1.0


def test_mi210_unpartitioned_gpus_and_pcie_bandwidth(exporter_for):
    scrape = exporter_for("amd-mi210x8").scrape()
    assert [s.labels["gpu_id"] for s in scrape.named("gpu_edge_temperature")] == [str(i) for i in range(8)]
    gpu2 = {"gpu_id": "2"}
    assert scrape.value("gpu_edge_temperature", **gpu2) == 40.0
    assert scrape.value("gpu_junction_temperature", **gpu2) == 44.0
    assert scrape.value("gpu_average_package_power", **gpu2) == 44.0
    assert scrape.named("gpu_package_power") == []  # MI210 has only power1_average
    # pcie_bw "1234 5678 256": packets received/sent times max payload, both ways, in Mb/s.
    assert scrape.value("pcie_bandwidth", **gpu2) == pytest.approx((1234 + 5678) * 256 * 8 / 1e6)
    labels = scrape.find("gpu_edge_temperature", **gpu2)[0].labels
    assert labels["gpu_partition_id"] == "0"
    assert labels["gpu_compute_partition_type"] == ""
    assert labels["card_model"] == "AMD Instinct MI210"
    assert scrape.value("gpu_nodes_total") == 8
    assert scrape.value("gpuop_gpu_pcie_receive_bytes_per_second", gpu="2", partition="") == 1234 * 256


def test_mi25_without_ras_has_no_ecc_series(exporter_for):
    scrape = exporter_for("amd-single").scrape()
    assert not [n for n in scrape.names() if "ecc" in n]
    assert scrape.value("gpu_edge_temperature", gpu_id="0") == 30.0
    assert scrape.find("gpu_health")[0].labels["serial_number"] == ""


def test_h100_dcgm_default_fields_and_labels(exporter_for):
    scrape = exporter_for("nvidia-h100x8").scrape()
    gpu3 = {"gpu": "3"}
    labels = scrape.find("DCGM_FI_DEV_GPU_TEMP", **gpu3)[0].labels
    assert labels == {
        "gpu": "3",
        "UUID": labels["UUID"],
        "pci_bus_id": "00000000:5D:00.0",
        "device": "nvidia3",
        "modelName": "NVIDIA H100 80GB HBM3",
        "hostname": "node-a",
        "DCGM_FI_DRIVER_VERSION": "550.54.15",
        "pod": "",
        "namespace": "",
        "container": "",
    }
    assert labels["UUID"].startswith("GPU-")
    expected = {
        "DCGM_FI_DEV_GPU_TEMP": 36,
        "DCGM_FI_DEV_MEMORY_TEMP": 33,
        "DCGM_FI_DEV_POWER_USAGE": 73,
        "DCGM_FI_DEV_POWER_MGMT_LIMIT": 700,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123_456_792,  # mJ
        "DCGM_FI_DEV_SM_CLOCK": 1980,
        "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_GPU_UTIL": 30,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 6,
        "DCGM_FI_DEV_FB_USED": 515,  # MiB
        "DCGM_FI_DEV_FB_FREE": 81559 - 515,
        "DCGM_FI_DEV_FB_TOTAL": 81559,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
        "DCGM_FI_DEV_PCIE_LINK_GEN": 5,
        "DCGM_FI_DEV_PCIE_LINK_WIDTH": 16,
        "DCGM_FI_DEV_XID_ERRORS": 0,
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0,
    }
    assert {name: scrape.value(name, **gpu3) for name in expected} == pytest.approx(expected)
    assert len(scrape.named("DCGM_FI_DEV_GPU_UTIL")) == 8
    assert not any(name.startswith(("gpu_", "pcie_")) for name in scrape.names())


def test_h100_neutral_names_cover_nvlink_pcie_and_throttling(exporter_for):
    scrape = exporter_for("nvidia-h100x8").scrape()
    gpu1 = {"gpu": "1", "partition": ""}
    assert scrape.value("gpuop_gpu_energy_joules_total", **gpu1) == pytest.approx(123_456.790)
    assert scrape.value("gpuop_gpu_power_average_watts", **gpu1) == 70.0
    assert scrape.value("gpuop_gpu_temperature_celsius", sensor="gpu", **gpu1) == 34.0
    assert scrape.value("gpuop_gpu_pcie_receive_bytes_per_second", **gpu1) == 2001 * 1024
    assert scrape.value("gpuop_gpu_pcie_transmit_bytes_per_second", **gpu1) == 1001 * 1024
    assert scrape.value("gpuop_gpu_active_links", link_type="nvlink", **gpu1) == 18
    assert scrape.value("gpuop_gpu_link_receive_bytes_total", link_type="nvlink", **gpu1) == 18 * 400 * 1024
    assert scrape.value("gpuop_gpu_throttle_active", reason="sw_power_cap", **gpu1) == 0
    assert scrape.value("gpuop_gpu_ecc_errors_total", severity="uncorrectable", **gpu1) == 0
    assert scrape.value("gpuop_gpu_last_xid", **gpu1) == 0


def test_h100_mig_devices_carry_gpu_instance_labels(exporter_for):
    scrape = exporter_for("nvidia-h100x8-mig").scrape()
    migs = scrape.find("DCGM_FI_DEV_FB_TOTAL", gpu="1", GPU_I_PROFILE="3g.40gb")
    assert sorted(s.labels["GPU_I_ID"] for s in migs) == ["1", "2"]
    assert {s.value for s in migs} == {40192}
    # The GPU itself is still reported, without GPU instance labels.
    whole = [s for s in scrape.find("DCGM_FI_DEV_FB_TOTAL", gpu="1") if "GPU_I_ID" not in s.labels]
    assert len(whole) == 1
    assert len(scrape.find("gpuop_gpu_health", gpu="0")) == 1 + 7
    assert scrape.value("gpuop_gpu_memory_total_bytes", gpu="2", partition="2") == 9856 * MIB


@pytest.mark.parametrize(
    "profile", ["amd-mi300x-cpx", "amd-mi300x-spx", "amd-mi210x8", "amd-single", "amd-radeon",
                "nvidia-h100x8", "nvidia-h100x8-mig", "cpu-only"],
)  # fmt: skip
def test_every_gpu_series_has_the_identity_labels(exporter_for, profile):
    scrape = exporter_for(profile).scrape()
    required = {
        "gpu_": {"gpu_id", "gpu_uuid", "serial_number", "pci_bus_id", "card_model", "hostname", "pod"},
        "pcie_": {"gpu_id", "gpu_uuid", "pci_bus_id", "card_model", "hostname", "pod"},
        "DCGM_": {"gpu", "UUID", "pci_bus_id", "modelName", "hostname", "pod", "namespace", "container"},
        "gpuop_gpu_": {"gpu", "uuid", "serial", "pci_bus_id", "model", "hostname", "pod", "namespace"},
    }
    for sample in scrape.samples:
        for prefix, labels in required.items():
            if sample.name.startswith(prefix) and sample.name != "gpu_nodes_total":
                assert labels <= set(sample.labels), sample
    if profile == "cpu-only":
        assert not [n for n in scrape.names() if not n.startswith("gpuop_exporter_")]
        assert scrape.value("gpuop_exporter_gpus") == 0


def test_naming_sets_choose_the_families(exporter_for):
    neutral_only = MetricsExporterConfig(naming_sets=["neutral"])
    scrape = exporter_for("amd-mi210x8", neutral_only).scrape()
    assert {n.split("_")[0] for n in scrape.names()} == {"gpuop"}
    vendor_only = MetricsExporterConfig(naming_sets=["amd", "dcgm"])
    scrape = exporter_for("nvidia-h100x8", vendor_only).scrape()
    assert not [n for n in scrape.names() if n.startswith("gpuop_gpu_")]
    assert scrape.named("DCGM_FI_DEV_GPU_TEMP")
