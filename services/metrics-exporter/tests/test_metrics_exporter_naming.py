"""The exposition parses with prometheus_client.parser and follows the naming rules."""

from __future__ import annotations

import gzip
import re

import pytest
from gpuop_common.probes import wants_gzip
from gpuop_metrics_exporter.naming import tables

# Prometheus base units (and the unitless suffixes we use) that a neutral gauge name must end with.
UNIT_SUFFIXES = (
    "_celsius", "_watts", "_joules_total", "_ratio", "_bytes", "_hertz", "_transfers_per_second",
    "_lanes", "_generation", "_bytes_per_second", "_seconds", "_total", "_health", "_active",
    "_links", "_units", "_xid", "_valid", "_up", "_gpus",
)  # fmt: skip

# dcgm-exporter field names we emit: its default-counters.csv fields plus documented DCGM fields.
DCGM_FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_POWER_MGMT_LIMIT",
    "DCGM_FI_DEV_PCIE_LINK_GEN", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
}  # fmt: skip
AMD_NAME = re.compile(r"^(gpu|pcie)_[a-z0-9_]+$")


@pytest.mark.parametrize("profile", ["amd-mi300x-cpx", "nvidia-h100x8-mig"])
def test_exposition_follows_prometheus_naming(exporter_for, profile):
    scrape = exporter_for(profile).scrape()
    assert not [n for n in scrape.names() if n.endswith("_created")]
    for sample in scrape.samples:
        assert re.fullmatch(r"[a-zA-Z_:][a-zA-Z0-9_:]*", sample.name)
        assert all(re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) for k in sample.labels)
    for family, kind in scrape.types.items():
        samples = scrape.by_family[family]
        assert samples, family
        if kind == "counter":
            # prometheus_client's parser names a counter family without the `_total` of its samples.
            assert {s.name for s in samples} == {family + "_total"}
        if family.startswith(("gpuop_gpu_", "gpuop_exporter_")):
            assert kind in ("gauge", "counter"), family
            name = family + "_total" if kind == "counter" else family
            assert name.endswith(UNIT_SUFFIXES), name
            assert (kind == "counter") == name.endswith("_total"), name
        elif family.startswith("DCGM_"):
            assert family in DCGM_FIELDS
        else:
            assert AMD_NAME.match(family), family


def test_neutral_counters_are_counters_and_end_in_total():
    neutral = tables()["neutral"]
    for family in neutral.families.values():
        assert (family.kind == "counter") == family.name.endswith("_total"), family
        assert family.name.startswith("gpuop_gpu_")


def test_gzip_scrape_is_the_same_exposition(exporter_for):
    exporter = exporter_for("amd-mi210x8")
    exporter.collector.collect_once()
    plain = exporter.collector.exposition(gzip_ok=False)
    zipped = exporter.collector.exposition(gzip_ok=True)
    # Cached body and the per-scrape age are two gzip members; every gzip reader concatenates them.
    unzipped = gzip.decompress(zipped)
    strip_age = re.compile(rb"^gpuop_exporter_snapshot_age_seconds .*$", re.MULTILINE)
    assert strip_age.sub(b"", unzipped) == strip_age.sub(b"", plain)
    assert b"gpuop_exporter_snapshot_age_seconds " in unzipped


@pytest.mark.parametrize(
    ("header", "expected"),
    [("gzip", True), ("deflate, gzip;q=1.0, *;q=0.5", True), ("gzip;q=0", False), ("identity", False),
     ("", False), ("*", True)],
)  # fmt: skip
def test_accept_encoding(header, expected):
    assert wants_gzip(header) is expected
