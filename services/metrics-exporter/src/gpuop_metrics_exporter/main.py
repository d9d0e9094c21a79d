"""`gpuop-metrics-exporter`: wiring of settings, GPU backends, the kubelet, the config file and HTTP.

One listener on `--port` serves `/metrics` (the collector's pre-rendered snapshot), `/healthz`,
`/readyz` and dcgm-exporter's `/health`: it is the shared probe server of `run_service`.

gpuop-metrics-exporter --host-root /host --port 5000
gpuop-metrics-exporter --once --host-root /path/to/root    # print one exposition and exit
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Sequence

from gpuop_common.config import MetricsExporterConfig
from gpuop_common.configfile import ConfigFileWatcher
from gpuop_common.gpu import GpuBackend, open_backends
from gpuop_common.kubelet.assignments import PodResourcesWatcher
from gpuop_common.shutdown import ServiceContext, run_service

from gpuop_metrics_exporter.collector import MetricsCollector
from gpuop_metrics_exporter.settings import ExporterSettings

log = logging.getLogger(__name__)

SERVICE = "metrics-exporter"


def build_collector(settings: ExporterSettings, config: MetricsExporterConfig) -> MetricsCollector:
    def opener() -> list[GpuBackend]:
        return open_backends(settings.host_root, settings.vendor)

    return MetricsCollector(
        opener,
        hostname=settings.node_name or socket.gethostname(),
        config=config,
        pods=PodResourcesWatcher(settings.pod_resources_socket),
        interval=settings.interval_override,
    )


def serve(ctx: ServiceContext[ExporterSettings]) -> int:
    settings = ctx.settings
    watcher = ConfigFileWatcher.load(
        settings.config_file,
        MetricsExporterConfig,
        interval=settings.config_poll_interval,
        node_name=settings.node_name,
    )
    collector = build_collector(settings, watcher.config)
    if settings.once:
        collector.collect_once()
        sys.stdout.buffer.write(collector.exposition(gzip_ok=False))
        collector.stop()
        return 0
    collector.config_error = lambda: watcher.error
    watcher.set_on_change(collector.set_config)
    collector.start_in_thread()
    watcher.start_in_thread(ctx.stopping)
    ctx.probes.set_metrics_source(collector.exposition)
    # Ready once the first snapshot exists: a scrape before it would see no GPU series.
    ctx.probes.add_readiness_check("snapshot", lambda: collector.snapshot is not None)
    ctx.probes.set_ready(True)
    log.info("serving metrics", extra={"url": f"{ctx.probes.url}/metrics"})
    try:
        ctx.stopping.wait()
    finally:
        collector.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(
        ExporterSettings,
        serve,
        service=SERVICE,
        argv=argv,
        probe_port=lambda settings: settings.listen_port,
        prerendered_metrics=True,
        health_aliases=("/health",),  # dcgm-exporter's path
    )


if __name__ == "__main__":
    raise SystemExit(main())
