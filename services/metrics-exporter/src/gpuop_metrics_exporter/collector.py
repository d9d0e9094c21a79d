"""Background collection: read the GPUs on an interval, render once, serve the bytes to every scrape.

A scrape never touches sysfs, NVML or the kubelet: it copies the last rendered snapshot (plain and
gzip) and appends the few series that change by the second (the snapshot's age).
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpuop_common.config import MetricsExporterConfig
from gpuop_common.config.metrics_exporter import NamingSet
from gpuop_common.gpu import FieldErrorKind, GpuBackend
from gpuop_common.kubelet.assignments import PodResourcesStatus, PodResourcesWatcher
from prometheus_client.metrics_core import Metric

from gpuop_metrics_exporter.exposition import (
    BackendReading,
    FamilySet,
    build_families,
    render,
    usable_extra_labels,
)
from gpuop_metrics_exporter.naming import Family, NamingTable, tables

log = logging.getLogger(__name__)

BackendOpener = Callable[[], list[GpuBackend]]
# Absent features are routine (no edge sensor on MI300X); only real read failures are warnings.
_QUIET_KINDS = (FieldErrorKind.MISSING, FieldErrorKind.NOT_SUPPORTED)
GZIP_LEVEL = 5


@dataclass(frozen=True)
class Snapshot:
    body: bytes
    body_gzip: bytes
    taken_monotonic: float
    duration_s: float
    extra_labels: dict[str, str]  # the config's usable extra labels, for the per-scrape series


@dataclass
class CollectorStats:
    collections_total: int = 0
    collection_errors: dict[str, int] = field(default_factory=dict)  # vendor -> count
    read_errors: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (gpu, field, kind)
    last_duration_s: float = 0.0
    gpus: int = 0


def exporter_families(
    stats: CollectorStats,
    pods: PodResourcesStatus | None,
    config_error: str | None,
    extra: Mapping[str, str],
) -> FamilySet:
    """The exporter's own series (they change once per collection, so they are cached too)."""
    out = FamilySet()

    def add(name: str, help_text: str, value: float, labels: dict[str, str] | None = None) -> None:
        family = Family(name, "counter" if name.endswith("_total") else "gauge", help_text)
        out.add(family, {**(labels or {}), **extra}, value)

    add("gpuop_exporter_collections_total", "Telemetry collections done.", stats.collections_total)
    add(
        "gpuop_exporter_collection_duration_seconds",
        "Duration of the last collection.",
        stats.last_duration_s,
    )
    add("gpuop_exporter_gpus", "GPUs the exporter sees on this node.", stats.gpus)
    for vendor, count in sorted(stats.collection_errors.items()):
        add(
            "gpuop_exporter_collection_errors_total",
            "Backend collections that failed.",
            count,
            {"vendor": vendor},
        )
    for (gpu, field_name, kind), count in sorted(stats.read_errors.items()):
        add(
            "gpuop_exporter_read_errors_total",
            "GPU readings that could not be taken.",
            count,
            {"uuid": gpu, "field": field_name, "kind": kind},
        )
    if pods is not None:
        add(
            "gpuop_exporter_pod_resources_up",
            "1 when the kubelet pod-resources API answered.",
            1.0 if pods.up else 0.0,
        )
        add(
            "gpuop_exporter_pod_resources_errors_total", "Failed pod-resources List calls.", pods.errors_total
        )
    add(
        "gpuop_exporter_config_valid",
        "0 while the config file is rejected (last good in use).",
        0.0 if config_error else 1.0,
    )
    return out


class MetricsCollector:
    def __init__(
        self,
        open_backends: BackendOpener,
        *,
        hostname: str,
        config: MetricsExporterConfig,
        pods: PodResourcesWatcher | None = None,
        config_error: Callable[[], str | None] = lambda: None,
        interval: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open_backends = open_backends
        self._backends: list[GpuBackend] | None = None
        self.hostname = hostname
        self._config = config
        self._pods = pods
        self.config_error = config_error
        self.interval = interval  # overrides the config's collectionIntervalSeconds when set
        self._clock = clock
        self._tables: dict[NamingSet, NamingTable] = tables()
        self.stats = CollectorStats()
        self._snapshot: Snapshot | None = None
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._logged: set[str] = set()  # keys are bounded: GPU x field x kind, vendors, error types
        self._unhealthy: dict[str, list[str]] = {}
        self._collect_lock = threading.Lock()
        self._thread: threading.Thread | None = None

    # -- config ------------------------------------------------------------------------------------
    @property
    def config(self) -> MetricsExporterConfig:
        return self._config

    def set_config(self, config: MetricsExporterConfig) -> None:
        """Apply a reloaded config: the next snapshot (collected right away) uses it."""
        self._config = config
        self._wake.set()

    # -- collection --------------------------------------------------------------------------------
    def _log_once(self, key: str, level: int, message: str, **extra: object) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, message, extra=extra)

    def _log_health_changes(self, unhealthy: dict[str, list[str]]) -> None:
        """One line when a GPU turns unhealthy (or its reasons change) and one when it recovers."""
        for gpu_id, reasons in sorted(unhealthy.items()):
            if self._unhealthy.get(gpu_id) != reasons:
                log.warning("GPU unhealthy", extra={"gpu": gpu_id, "reasons": reasons})
        for gpu_id in sorted(set(self._unhealthy) - set(unhealthy)):
            log.info("GPU healthy again", extra={"gpu": gpu_id})
        self._unhealthy = dict(unhealthy)

    def _backends_now(self) -> list[GpuBackend]:
        if self._backends:
            return self._backends
        try:
            self._backends = self._open_backends()
        except Exception as exc:
            key = f"open:{type(exc).__name__}"
            self._log_once(key, logging.ERROR, "cannot open GPU backends", error=str(exc))
            self._backends = []
        if not self._backends:
            self._log_once("no-gpus", logging.WARNING, "no GPUs found; retrying every interval")
        return self._backends

    def _read(self, backend: GpuBackend) -> BackendReading | None:
        vendor = backend.vendor.value
        try:
            reading = BackendReading(
                backend.vendor, backend.enumerate(), backend.telemetry(), backend.health()
            )
        except Exception as exc:
            self.stats.collection_errors[vendor] = self.stats.collection_errors.get(vendor, 0) + 1
            self._log_once(
                f"read:{vendor}:{type(exc).__name__}",
                logging.ERROR,
                "GPU backend failed",
                vendor=vendor,
                error=str(exc),
            )
            return None
        for tel in reading.telemetry:
            for error in tel.errors:
                key = (error.gpu_id, error.field, error.kind.value)
                self.stats.read_errors[key] = self.stats.read_errors.get(key, 0) + 1
                level = logging.DEBUG if error.kind in _QUIET_KINDS else logging.WARNING
                self._log_once(
                    f"field:{key}",
                    level,
                    "GPU reading failed; series omitted",
                    gpu=error.gpu_id,
                    field=error.field,
                    kind=error.kind.value,
                    source=error.source,
                    detail=error.detail,
                )
        return reading

    def collect_once(self) -> Snapshot:
        """Read every backend and the kubelet, build and render a new snapshot."""
        with self._collect_lock:
            started = self._clock()
            config = self._config
            pods = self._pods.poll() if self._pods is not None else None
            readings = [r for b in self._backends_now() if (r := self._read(b)) is not None]
            result = build_families(
                readings, pods.assignments if pods else {}, config, self.hostname, self._tables
            )
            self._log_health_changes(result.unhealthy)
            for label in result.label_conflicts:
                message = "extraLabels entry would replace an identity label; ignored"
                self._log_once(f"conflict:{label}", logging.WARNING, message, label=label)
            self.stats.collections_total += 1
            self.stats.gpus = sum(len(r.devices) for r in readings)
            self.stats.last_duration_s = self._clock() - started
            extra, _ = usable_extra_labels(config)
            own = exporter_families(self.stats, pods, self.config_error(), extra)
            body = render(result.families.metrics() + own.metrics())
            snapshot = Snapshot(
                body, gzip.compress(body, GZIP_LEVEL), self._clock(), self.stats.last_duration_s, extra
            )
            self._snapshot = snapshot
            return snapshot

    def run(self) -> None:
        """Collect now and every collectionIntervalSeconds until `stop()`; a failure never ends it."""
        while not self._stopped.is_set():
            try:
                self.collect_once()
            except Exception:
                log.exception("collection failed; serving the previous snapshot")
            self._wake.wait(self.interval or self._config.collection_interval_seconds)
            self._wake.clear()

    def start_in_thread(self) -> threading.Thread:
        self._thread = threading.Thread(target=self.run, name="gpuop-collector", daemon=True)
        self._thread.start()
        return self._thread

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop, wait for a collection in flight, then release NVML and the channel."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
        for backend in self._backends or []:
            backend.close()
        if self._pods is not None:
            self._pods.close()

    # -- serving -----------------------------------------------------------------------------------
    @property
    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def age_metric(self, snapshot: Snapshot | None) -> Metric:
        metric = Metric(
            "gpuop_exporter_snapshot_age_seconds", "Seconds since the served snapshot was taken.", "gauge"
        )
        if snapshot is not None:
            metric.add_sample(
                metric.name,
                snapshot.extra_labels,
                max(0.0, self._clock() - snapshot.taken_monotonic),
            )
        return metric

    def exposition(self, gzip_ok: bool) -> bytes:
        """The body of one scrape: the cached snapshot plus its age (gzip members concatenate)."""
        snapshot = self._snapshot
        tail = render([self.age_metric(snapshot)])
        if gzip_ok:
            head = snapshot.body_gzip if snapshot else b""
            return head + gzip.compress(tail, GZIP_LEVEL)
        return (snapshot.body if snapshot else b"") + tail
