"""The HTTP side in-process: scrapes are served from the snapshot, never blocked by a collection in
flight and never failed by bad readings."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpuop_common.config import MetricsExporterConfig
from gpuop_common.gpu import AmdSysfsBackend, GpuTelemetry
from gpuop_common.probes import ProbeServer
from gpuop_metrics_exporter.collector import MetricsCollector
from gpuop_sim.nodes import set_garbage, vanish_gpu


@pytest.fixture
def serve() -> Iterator:
    servers: list[ProbeServer] = []

    def start(collector: MetricsCollector) -> str:
        # What main() wires: the shared probe server serving the collector's pre-rendered snapshot.
        server = ProbeServer("127.0.0.1", 0, prerendered_metrics=True, health_aliases=("/health",))
        server.set_metrics_source(collector.exposition)
        server.start_in_thread()
        servers.append(server)
        return server.url

    yield start
    for server in servers:
        server.stop_thread()


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return int(response.status), response.read().decode()


class StallingBackend(AmdSysfsBackend):
    """Real AMD backend whose telemetry hangs (like a wedged sysfs read) once `stall` is set."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.stall = threading.Event()
        self.stalled = threading.Event()
        self.release = threading.Event()

    def telemetry(self) -> list[GpuTelemetry]:
        if self.stall.is_set():
            self.stalled.set()
            self.release.wait(30)
        return super().telemetry()


def test_scrape_is_served_while_a_collection_hangs(exporter_for, serve, parse_exposition):
    info = exporter_for("amd-mi210x8").info
    backend = StallingBackend(info.root)
    collector = MetricsCollector(lambda: [backend], hostname="node-a", config=MetricsExporterConfig())
    collector.collect_once()
    url = serve(collector)
    backend.stall.set()
    hung = threading.Thread(target=collector.collect_once, daemon=True)
    hung.start()
    try:
        assert backend.stalled.wait(10)
        status, body = get(f"{url}/metrics")
        assert status == 200
        scrape = parse_exposition(body.encode())
        assert scrape.value("gpu_junction_temperature", gpu_id="0") == 42.0
        assert scrape.value("gpuop_exporter_collections_total") == 1
        assert scrape.value("gpuop_exporter_snapshot_age_seconds") >= 0
    finally:
        backend.release.set()
        hung.join(30)
    collector.stop()


def test_metrics_stays_200_with_broken_readings(exporter_for, serve, parse_exposition):
    exporter = exporter_for("amd-mi210x8")
    root = exporter.root
    for path in sorted(root.glob("sys/devices/**/hwmon/hwmon*/*_input")):
        set_garbage(root, str(path.relative_to(root)))
    for path in sorted(root.glob("sys/devices/**/ras/*_err_count")):
        set_garbage(root, str(path.relative_to(root)), "ue: lots\n")
    vanish_gpu(root, exporter.info.pci_addresses[7])
    exporter.collector.collect_once()
    url = serve(exporter.collector)
    status, body = get(f"{url}/metrics")
    assert status == 200
    scrape = parse_exposition(body.encode())
    assert scrape.named("gpu_junction_temperature") == []
    assert scrape.named("gpu_ecc_uncorrect_umc") == []
    assert len(scrape.named("gpu_health")) == 7
    kinds = {s.labels["kind"] for s in scrape.named("gpuop_exporter_read_errors_total")}
    assert "invalid" in kinds
    assert get(f"{url}/healthz")[0] == 200
