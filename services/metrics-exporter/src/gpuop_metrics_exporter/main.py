"""`gpuop-metrics-exporter`: wiring of settings, GPU backends, the kubelet, the config file and HTTP.

gpuop-metrics-exporter --host-root /host --port 5000
gpuop-metrics-exporter --once --host-root /path/to/root    # print one exposition and exit
"""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Sequence

from gpuop_common.config import MetricsExporterConfig
from gpuop_common.configfile import ConfigFileError, ConfigFileWatcher, load_config
from gpuop_common.gpu import GpuBackend, open_backends
from gpuop_common.shutdown import ServiceContext, run_service

from gpuop_metrics_exporter.attribution import PodResourcesWatcher
from gpuop_metrics_exporter.collector import MetricsCollector
from gpuop_metrics_exporter.server import ExporterServer
from gpuop_metrics_exporter.settings import ExporterSettings

log = logging.getLogger(__name__)

SERVICE = "metrics-exporter"


def initial_config(settings: ExporterSettings) -> MetricsExporterConfig:
    """The ConfigMap file's config, or the defaults when it is absent or invalid (logged)."""
    if not settings.config_file.exists():
        log.info("no config file; using defaults", extra={"path": str(settings.config_file)})
        return MetricsExporterConfig()
    try:
        return load_config(settings.config_file, MetricsExporterConfig)
    except ConfigFileError as exc:
        log.error("config file rejected, using defaults", extra={"error": str(exc)})
        return MetricsExporterConfig()


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
    collector = build_collector(settings, initial_config(settings))
    if settings.once:
        collector.collect_once()
        sys.stdout.buffer.write(collector.exposition(gzip_ok=False))
        collector.stop()
        return 0
    watcher: ConfigFileWatcher[MetricsExporterConfig] | None = None
    if settings.config_file.exists():
        watcher = ConfigFileWatcher(
            settings.config_file,
            MetricsExporterConfig,
            collector.set_config,
            interval=settings.config_poll_interval,
            default=collector.config,
        )
        collector.config_error = lambda: watcher.error if watcher else None
    server = ExporterServer(settings.bind_address, settings.port, collector.exposition)
    try:
        server.start_in_thread()
    except OSError as exc:
        log.error(
            "cannot listen", extra={"address": f"{settings.bind_address}:{settings.port}", "error": str(exc)}
        )
        return 1
    collector.start_in_thread()
    if watcher is not None:
        watcher.start_in_thread(ctx.stopping)
    for probes in (server, ctx.probes):
        # Ready once the first snapshot exists: a scrape before it would see no GPU series.
        probes.add_readiness_check("snapshot", lambda: collector.snapshot is not None)
        probes.set_ready(True)
    log.info("serving metrics", extra={"url": f"{server.url}/metrics"})
    try:
        ctx.stopping.wait()
    finally:
        server.set_ready(False, "stopping")
        collector.stop()
        server.stop_thread()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(ExporterSettings, serve, service=SERVICE, argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
