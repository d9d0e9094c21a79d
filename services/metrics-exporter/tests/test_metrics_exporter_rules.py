"""Pure rules: id formats, which set applies to which vendor, XIDs, thresholds, naming tables."""

from __future__ import annotations

import pytest
from gpuop_common.config import MetricsExporterConfig
from gpuop_common.gpu import HealthReason, Vendor
from gpuop_common.kubelet.assignments import base_device_id
from gpuop_metrics_exporter.entities import applies, nvml_bus_id
from gpuop_metrics_exporter.exposition import threshold_violations, usable_extra_labels
from gpuop_metrics_exporter.naming import tables
from gpuop_metrics_exporter.readings import last_xid


def test_pci_bus_id_in_dcgm_form() -> None:
    assert nvml_bus_id("0000:3b:00.0") == "00000000:3B:00.0"
    assert nvml_bus_id("garbage") == "garbage"


def test_vendor_sets_apply_to_their_vendor_only() -> None:
    assert applies("amd", Vendor.AMD) and not applies("amd", Vendor.NVIDIA)
    assert applies("dcgm", Vendor.NVIDIA) and not applies("dcgm", Vendor.AMD)
    assert applies("neutral", Vendor.AMD) and applies("neutral", Vendor.NVIDIA)


def test_replica_ids_map_to_their_device() -> None:
    assert base_device_id("GPU-1234::7") == "GPU-1234"
    assert base_device_id("0000:03:00.0") == "0000:03:00.0"


def test_last_xid_is_the_newest_critical_one() -> None:
    reasons = (
        HealthReason("xid_critical", "critical XID 48", "nvml:xid:48"),
        HealthReason("device_node_missing", "gone", "/dev/nvidia0"),
        HealthReason("xid_critical", "critical XID 79", "nvml:xid:79"),
    )
    assert last_xid(reasons) == 79
    assert last_xid(reasons[1:2]) is None


def test_threshold_messages_are_stable_across_values() -> None:
    config = MetricsExporterConfig.model_validate({"healthThresholds": [{"metric": "m", "min": 1, "max": 5}]})
    assert threshold_violations([("m", 7.0)], config) == threshold_violations([("m", 9.0)], config)
    assert threshold_violations([("m", 0.5), ("m", 0.2)], config) == ["m below 1"]
    assert threshold_violations([("m", 3.0), ("other", 100.0)], config) == []


def test_extra_labels_never_take_reserved_names() -> None:
    config = MetricsExporterConfig(extra_labels={"cluster_name": "c", "pod": "x", "UUID": "y"})
    assert usable_extra_labels(config) == ({"cluster_name": "c"}, ["UUID", "pod"])


@pytest.mark.parametrize("naming", ["amd", "dcgm", "neutral"])
def test_every_fixed_series_has_a_family(naming: str) -> None:
    table = tables()[naming]  # type: ignore[index]
    for specs in table.fixed.values():
        for spec in specs:
            assert spec.name in table.families
    assert table.resolve("health") or naming == "dcgm"
    assert table.resolve("no.such.reading") == []
