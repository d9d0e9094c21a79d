"""Broken hardware readings: the series goes away, an error counter rises, the exporter keeps serving."""

from __future__ import annotations

from pathlib import Path

from gpuop_common.config import MetricsExporterConfig
from gpuop_common.gpu import AmdSysfsBackend, Vendor
from gpuop_metrics_exporter.collector import MetricsCollector
from gpuop_sim.nodes import inject_xid, raise_ras, remove_file, set_garbage, update_nvml_state, vanish_gpu


def hwmon_file(root: Path, bdf: str, label: str) -> str:
    """Relative path of the hwmon `_input` file whose `_label` is `label` for the GPU at `bdf`."""
    device = (root / "sys/bus/pci/devices" / bdf).resolve()
    for label_file in sorted(device.glob("hwmon/hwmon*/temp*_label")):
        if label_file.read_text().strip() == label:
            return str(label_file.with_name(label_file.name.replace("_label", "_input")).relative_to(root))
    raise AssertionError(f"no {label} sensor for {bdf}")


def test_garbage_sysfs_value_omits_that_series_and_counts_the_error(exporter_for):
    exporter = exporter_for("amd-mi210x8")
    bdf = exporter.info.pci_addresses[0]
    uuid = exporter.scrape().find("gpu_health", gpu_id="0")[0].labels["gpu_uuid"]
    set_garbage(exporter.root, hwmon_file(exporter.root, bdf, "junction"))
    first = exporter.scrape()
    assert first.find("gpu_junction_temperature", gpu_id="0") == []
    assert first.find("gpuop_gpu_temperature_celsius", gpu="0", sensor="junction") == []
    # Everything else about that GPU and the other GPUs stays.
    assert first.value("gpu_edge_temperature", gpu_id="0") == 38.0
    assert first.value("gpu_junction_temperature", gpu_id="1") == 43.0
    errors = {"uuid": uuid, "field": "temperature.junction", "kind": "invalid"}
    assert first.value("gpuop_exporter_read_errors_total", **errors) == 1
    assert exporter.scrape().value("gpuop_exporter_read_errors_total", **errors) == 2


def test_missing_sysfs_file_omits_the_derived_series_too(exporter_for):
    exporter = exporter_for("amd-mi210x8")
    bdf = exporter.info.pci_addresses[4]
    device = (exporter.root / "sys/bus/pci/devices" / bdf).resolve()
    remove_file(exporter.root, str((device / "mem_info_vram_used").relative_to(exporter.root)))
    scrape = exporter.scrape()
    assert scrape.find("gpu_used_vram", gpu_id="4") == []
    assert scrape.find("gpu_free_vram", gpu_id="4") == []  # free = total - used needs both
    assert scrape.value("gpu_total_vram", gpu_id="4") == 64 * 1024
    assert scrape.find("gpuop_exporter_read_errors_total", field="vram.used", kind="missing")


def test_nvml_unsupported_call_omits_the_series_and_counts(exporter_for):
    exporter = exporter_for("nvidia-h100x8")
    update_nvml_state(exporter.root, lambda s: s.gpus[2].unsupported.append("nvmlDeviceGetPowerUsage"))
    scrape = exporter.scrape()
    assert scrape.find("DCGM_FI_DEV_POWER_USAGE", gpu="2") == []
    assert scrape.find("gpuop_gpu_power_watts", gpu="2") == []
    assert scrape.value("DCGM_FI_DEV_POWER_USAGE", gpu="1") == 71
    uuid = scrape.find("DCGM_FI_DEV_GPU_TEMP", gpu="2")[0].labels["UUID"]
    assert (
        scrape.value(
            "gpuop_exporter_read_errors_total", uuid=uuid, field="power.current", kind="not_supported"
        )
        == 1
    )


def test_vanished_gpu_series_disappear(exporter_for):
    exporter = exporter_for("amd-mi210x8")
    assert exporter.scrape().value("gpu_nodes_total") == 8
    gone = exporter.info.pci_addresses[5]
    vanished = vanish_gpu(exporter.root, gone)
    scrape = exporter.scrape()
    assert not [s for s in scrape.samples if s.labels.get("pci_bus_id") == gone]
    assert scrape.value("gpu_nodes_total") == 7
    assert scrape.value("gpuop_exporter_gpus") == 7
    vanished.restore()
    assert [s for s in exporter.scrape().samples if s.labels.get("pci_bus_id") == gone]


def test_lost_nvidia_gpu_series_disappear(exporter_for):
    exporter = exporter_for("nvidia-h100x8")
    vanish_gpu(exporter.root, "6")
    scrape = exporter.scrape()
    assert scrape.find("DCGM_FI_DEV_GPU_TEMP", gpu="6") == []
    assert len(scrape.named("DCGM_FI_DEV_GPU_TEMP")) == 7


def test_ras_uncorrectable_rise_marks_the_gpu_unhealthy(exporter_for):
    exporter = exporter_for("amd-mi300x-cpx")
    assert exporter.scrape().value("gpu_health", gpu_id="8") == 1.0
    bdf = exporter.info.pci_addresses[1]
    raise_ras(exporter.root, bdf, "umc", by=2)
    scrape = exporter.scrape()
    assert scrape.value("gpu_ecc_uncorrect_umc", gpu_id="8") == 2
    assert scrape.value("gpu_ecc_uncorrect_total", gpu_id="8") == 2
    # Every partition of that MI300X is unhealthy; the other GPUs are not.
    assert {s.value for s in scrape.named("gpu_health") if s.labels["gpu_uuid"] ==
            scrape.find("gpu_health", gpu_id="8")[0].labels["gpu_uuid"]} == {0.0}  # fmt: skip
    assert scrape.value("gpu_health", gpu_id="0") == 1.0
    assert (
        scrape.value("gpuop_gpu_ecc_block_errors_total", gpu="1", block="umc", severity="uncorrectable") == 2
    )


def test_critical_xid_is_the_last_xid_and_unhealthy(exporter_for):
    exporter = exporter_for("nvidia-h100x8")
    exporter.scrape()
    inject_xid(exporter.root, "4", 79)
    scrape = exporter.scrape()
    assert scrape.value("DCGM_FI_DEV_XID_ERRORS", gpu="4") == 79
    assert scrape.value("gpuop_gpu_last_xid", gpu="4") == 79
    assert scrape.value("gpuop_gpu_health", gpu="4") == 0.0
    assert scrape.value("gpuop_gpu_health", gpu="3") == 1.0


class ExplodingBackend:
    """A backend whose driver call fails outright (not a single bad reading)."""

    vendor = Vendor.NVIDIA

    def enumerate(self):
        raise RuntimeError("driver wedged")

    def close(self) -> None:
        pass


def test_failing_backend_is_counted_and_the_rest_still_served(exporter_for, parse_exposition):
    exporter = exporter_for("amd-single")
    collector = MetricsCollector(
        lambda: [ExplodingBackend(), AmdSysfsBackend(exporter.root)],  # type: ignore[list-item]
        hostname="node-a",
        config=MetricsExporterConfig(),
    )
    collector.collect_once()
    collector.collect_once()
    scrape = parse_exposition(collector.exposition(gzip_ok=False))
    assert scrape.value("gpuop_exporter_collection_errors_total", vendor="nvidia") == 2
    assert scrape.value("gpu_edge_temperature", gpu_id="0") == 30.0
