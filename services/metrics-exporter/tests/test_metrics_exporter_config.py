"""The exporter's ConfigMap settings: field allow/deny, extra labels, health thresholds, hot reload."""

from __future__ import annotations

import logging
from pathlib import Path

from gpuop_common.config import MetricsExporterConfig
from gpuop_common.configfile import ConfigFileWatcher
from gpuop_sim.nodes import set_temperature


def gpu_names(scrape) -> set[str]:
    return {n for n in scrape.names() if not n.startswith("gpuop_exporter_")}


def test_allow_list_exports_only_those_fields(exporter_for):
    config = MetricsExporterConfig(fields_allow=["gpu_junction_temperature", "gpuop_gpu_power_watts"])
    scrape = exporter_for("amd-mi300x-spx", config).scrape()
    assert gpu_names(scrape) == {"gpu_junction_temperature", "gpuop_gpu_power_watts"}
    # The exporter's own health series are never filtered away.
    assert scrape.value("gpuop_exporter_collections_total") == 1


def test_deny_list_drops_fields(exporter_for):
    config = MetricsExporterConfig(fields_deny=["DCGM_FI_DEV_GPU_UTIL", "gpuop_gpu_throttle_active"])
    names = exporter_for("nvidia-h100x8", config).scrape().names()
    assert "DCGM_FI_DEV_GPU_UTIL" not in names
    assert "gpuop_gpu_throttle_active" not in names
    assert "DCGM_FI_DEV_GPU_TEMP" in names


def test_extra_labels_on_every_series_but_never_replacing_identity(exporter_for, caplog):
    config = MetricsExporterConfig(extra_labels={"cluster_name": "eu-1", "hostname": "spoofed"})
    with caplog.at_level(logging.WARNING):
        scrape = exporter_for("amd-single", config).scrape()
    assert {s.labels.get("cluster_name") for s in scrape.samples} == {"eu-1"}
    assert {s.labels["hostname"] for s in scrape.samples if "hostname" in s.labels} == {"node-a"}
    assert any("extraLabels entry would replace" in r.getMessage() for r in caplog.records)


def test_health_threshold_marks_the_gpu_and_its_partitions_unhealthy(exporter_for):
    # MI300X junction is 45 C on GPU 0 and 46 C on GPU 1 (logical ids 0 and 8 in CPX).
    config = MetricsExporterConfig.model_validate(
        {"healthThresholds": [{"metric": "gpu_junction_temperature", "max": 45.5}]}
    )
    scrape = exporter_for("amd-mi300x-cpx", config).scrape()
    assert scrape.value("gpu_health", gpu_id="0") == 1.0
    assert {scrape.value("gpu_health", gpu_id=str(i)) for i in range(8, 16)} == {0.0}
    assert scrape.value("gpuop_gpu_health", gpu="1", partition="4") == 0.0
    assert scrape.value("gpuop_gpu_health", gpu="0", partition="4") == 1.0


def test_min_threshold_on_a_neutral_metric(exporter_for):
    config = MetricsExporterConfig.model_validate(
        {"healthThresholds": [{"metric": "gpuop_gpu_clock_hertz", "min": 2.0e9}]}
    )
    scrape = exporter_for("nvidia-h100x8", config).scrape()
    # SM clock 1980 MHz is below 2 GHz on every GPU.
    assert {s.value for s in scrape.named("gpuop_gpu_health")} == {0.0}


def test_hot_reload_applies_good_edits_and_keeps_the_last_good_one(exporter_for, tmp_path: Path):
    exporter = exporter_for("amd-mi210x8")
    path = tmp_path / "config.yaml"
    path.write_text("namingSets: [neutral]\n")
    watcher = ConfigFileWatcher(path, MetricsExporterConfig, exporter.collector.set_config, interval=60)
    exporter.collector.config_error = lambda: watcher.error
    assert watcher.poll()
    scrape = exporter.scrape()
    assert "gpu_health" not in scrape.names()
    assert scrape.value("gpuop_exporter_config_valid") == 1.0
    path.write_text("namingSets: [neutral]\nextraLabels: {cluster_name: c1}\ncollectionIntervalSeconds: 0\n")
    assert not watcher.poll()
    scrape = exporter.scrape()
    assert scrape.value("gpuop_exporter_config_valid") == 0.0
    assert "cluster_name" not in scrape.find("gpuop_gpu_health", gpu="0")[0].labels
    path.write_text("namingSets: [amd]\nextraLabels: {cluster_name: c1}\n")
    assert watcher.poll()
    scrape = exporter.scrape()
    assert scrape.find("gpu_health", gpu_id="0")[0].labels["cluster_name"] == "c1"
    assert not [n for n in scrape.names() if n.startswith("gpuop_gpu_")]
    assert scrape.value("gpuop_exporter_config_valid", cluster_name="c1") == 1.0


def test_unhealthy_gpu_is_logged_on_change_not_every_collection(exporter_for, caplog):
    config = MetricsExporterConfig.model_validate(
        {"healthThresholds": [{"metric": "gpu_edge_temperature", "max": 80}]}
    )
    exporter = exporter_for("amd-mi210x8", config)
    bdf = exporter.info.pci_addresses[0]
    with caplog.at_level(logging.INFO, logger="gpuop_metrics_exporter.collector"):
        for celsius in (85.0, 86.0, 87.0):
            set_temperature(exporter.root, bdf, celsius, sensor="edge")
            assert exporter.scrape().value("gpu_health", gpu_id="0") == 0.0
        set_temperature(exporter.root, bdf, 40.0, sensor="edge")
        assert exporter.scrape().value("gpu_health", gpu_id="0") == 1.0
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("GPU unhealthy") == 1
    assert messages.count("GPU healthy again") == 1


def test_threshold_applies_to_a_denied_metric(exporter_for):
    config = MetricsExporterConfig.model_validate(
        {
            "fieldsDeny": ["DCGM_FI_DEV_GPU_TEMP"],
            "healthThresholds": [{"metric": "DCGM_FI_DEV_GPU_TEMP", "max": 39.5}],
        }
    )
    scrape = exporter_for("nvidia-h100x8", config).scrape()
    assert scrape.named("DCGM_FI_DEV_GPU_TEMP") == []
    # GPU temperature is 33 C + index: GPU 7 (40 C) is over the limit, GPU 6 (39 C) is not.
    assert scrape.value("gpuop_gpu_health", gpu="7") == 0.0
    assert scrape.value("gpuop_gpu_health", gpu="6") == 1.0
