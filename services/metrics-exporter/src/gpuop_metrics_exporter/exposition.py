"""From one collection (devices, telemetry, health, pod assignments, config) to metric families.

`build_families` is pure: the collector calls it once per interval and renders the result once, so
a scrape only copies bytes. Series of a GPU that is no longer enumerated simply are not built.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from gpuop_common.config import MetricsExporterConfig
from gpuop_common.config.metrics_exporter import NamingSet
from gpuop_common.gpu import GpuDevice, GpuHealth, GpuTelemetry, Vendor
from gpuop_common.kubelet.assignments import Assignments, PodRef, holders_of
from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric

from gpuop_metrics_exporter.entities import (
    POD_LABELS,
    RESERVED_LABELS,
    Entity,
    applies,
    entities_for,
    entity_labels,
    health_reasons,
)
from gpuop_metrics_exporter.naming import AMD_NODE_FAMILY, Family, NamingTable
from gpuop_metrics_exporter.readings import Readings, last_xid, telemetry_readings

LabelDict = dict[str, str]


@dataclass(frozen=True)
class BackendReading:
    """What one backend returned in one collection."""

    vendor: Vendor
    devices: list[GpuDevice]
    telemetry: list[GpuTelemetry]
    health: list[GpuHealth]


@dataclass
class FamilySet:
    """Samples grouped by family, in the order families were first used."""

    families: dict[str, Family] = field(default_factory=dict)
    samples: dict[str, list[tuple[LabelDict, float]]] = field(default_factory=dict)

    def add(self, family: Family, labels: LabelDict, value: float) -> None:
        if family.name not in self.families:
            self.families[family.name] = family
            self.samples[family.name] = []
        self.samples[family.name].append((labels, value))

    def metrics(self) -> list[Metric]:
        result = []
        for name, family in self.families.items():
            # prometheus_client appends `_total` to a counter family's name itself.
            base = name.removesuffix("_total") if family.kind == "counter" else name
            metric = Metric(base, family.help, family.kind)
            for labels, value in self.samples[name]:
                metric.add_sample(name, labels, value)
            result.append(metric)
        return result


def entity_readings(entity: Entity, tel: GpuTelemetry | None, health: GpuHealth | None) -> Readings:
    """Readings of one entity except `health` (thresholds decide that after all series exist)."""
    readings: Readings = {}
    if tel is not None:
        readings.update(telemetry_readings(tel, entity.gpu.vendor))
    part = entity.partition
    if part is not None:
        if part.memory_bytes is not None:
            readings["partition.memory"] = float(part.memory_bytes)
        if part.compute_units is not None:
            readings["compute_units"] = float(part.compute_units)
    elif entity.mig is None and entity.gpu.compute_units is not None:
        readings["compute_units"] = float(entity.gpu.compute_units)
    if entity.gpu.vendor == Vendor.NVIDIA and entity.device_readings:
        readings["xid.last"] = float(last_xid(health.reasons if health else ()) or 0)
    return readings


def pod_label_sets(holders: tuple[PodRef, ...]) -> list[LabelDict]:
    """One label set per container holding the device (shared GPUs repeat the series, like dcgm)."""
    if not holders:
        return [dict.fromkeys(POD_LABELS, "")]
    return [{"pod": h.pod, "namespace": h.namespace, "container": h.container} for h in holders]


def usable_extra_labels(config: MetricsExporterConfig) -> tuple[LabelDict, list[str]]:
    """(extra labels to add, names dropped because the exporter sets that label itself)."""
    dropped = sorted(name for name in config.extra_labels if name in RESERVED_LABELS)
    return {k: v for k, v in config.extra_labels.items() if k not in RESERVED_LABELS}, dropped


def allowed(name: str, config: MetricsExporterConfig) -> bool:
    return (not config.fields_allow or name in config.fields_allow) and name not in config.fields_deny


def threshold_violations(samples: Iterable[tuple[str, float]], config: MetricsExporterConfig) -> list[str]:
    """Thresholds one GPU's samples (name, value) cross, as stable messages (no values, so that a
    GPU that stays over a limit is the same state from one collection to the next)."""
    limits = {t.metric: t for t in config.health_thresholds}
    found: set[str] = set()
    for name, value in samples:
        limit = limits.get(name)
        if limit is None:
            continue
        if limit.max is not None and value > limit.max:
            found.add(f"{name} above {limit.max:g}")
        elif limit.min is not None and value < limit.min:
            found.add(f"{name} below {limit.min:g}")
    return sorted(found)


@dataclass
class BuildResult:
    families: FamilySet
    unhealthy: dict[str, list[str]]  # GPU id -> health reasons and threshold breaches
    label_conflicts: list[str]  # extra labels dropped because they would replace identity labels


def _telemetry_index(reading: BackendReading) -> dict[tuple[str, str | None], GpuTelemetry]:
    return {(t.gpu_id, t.partition_id): t for t in reading.telemetry}


def _telemetry_of(
    entity: Entity, index: Mapping[tuple[str, str | None], GpuTelemetry]
) -> GpuTelemetry | None:
    if entity.mig is not None:
        return index.get((entity.gpu.id, entity.mig.uuid))
    return index.get((entity.gpu.id, None)) if entity.device_readings else None


def _sets_for(
    vendor: Vendor, tables: Mapping[NamingSet, NamingTable], enabled: Iterable[NamingSet]
) -> list[NamingTable]:
    return [tables[name] for name in enabled if name in tables and applies(name, vendor)]


def _add_series(
    out: FamilySet,
    table: NamingTable,
    labels: LabelDict,
    values: Readings,
    *,
    config: MetricsExporterConfig,
    seen: list[tuple[str, float]],
) -> None:
    """One entity's readings in one naming set; `seen` gets every value, filtered or not, so a
    threshold also applies to a metric the allow/deny lists keep out of the exposition."""
    for key, value in values.items():
        for spec in table.resolve(key):
            scaled = value * spec.scale
            seen.append((spec.name, scaled))
            if allowed(spec.name, config):
                sample = {**labels, **dict(spec.labels)} if spec.labels else labels
                out.add(table.families[spec.name], sample, scaled)


def _gpu_problems(
    reading: BackendReading,
    health: Mapping[str, GpuHealth],
    seen: Mapping[str, list[tuple[str, float]]],
    config: MetricsExporterConfig,
) -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    for gpu in reading.devices:
        reasons = [r.message for r in health.get(gpu.id, GpuHealth(gpu.id)).reasons]
        reasons += threshold_violations(seen.get(gpu.id, ()), config)
        if reasons:
            problems[gpu.id] = reasons
    return problems


def build_families(
    readings: Iterable[BackendReading],
    assignments: Assignments,
    config: MetricsExporterConfig,
    hostname: str,
    tables: Mapping[NamingSet, NamingTable],
) -> BuildResult:
    out = FamilySet()
    unhealthy: dict[str, list[str]] = {}
    extra, dropped = usable_extra_labels(config)
    amd_count = 0
    for reading in readings:
        index = _telemetry_index(reading)
        health = {h.gpu_id: h for h in reading.health}
        sets = _sets_for(reading.vendor, tables, config.naming_sets)
        labelled: list[tuple[Entity, NamingTable, LabelDict]] = []
        seen: dict[str, list[tuple[str, float]]] = {}
        for entity in entities_for(reading.devices):
            amd_count += reading.vendor == Vendor.AMD
            values = entity_readings(entity, _telemetry_of(entity, index), health.get(entity.gpu.id))
            holders = holders_of(entity.device_ids, assignments)
            for table in sets:
                identity = entity_labels(entity, table.name, hostname)
                for pods in pod_label_sets(holders):
                    labels = {**identity, **pods, **extra}
                    labelled.append((entity, table, labels))
                    _add_series(
                        out, table, labels, values, config=config, seen=seen.setdefault(entity.gpu.id, [])
                    )
        problems = _gpu_problems(reading, health, seen, config)
        unhealthy.update(problems)
        # Health last: a threshold crossed by any series of a GPU makes all of its entities unhealthy.
        for entity, table, labels in labelled:
            healthy = not health_reasons(entity, health.get(entity.gpu.id)) and entity.gpu.id not in problems
            for spec in table.resolve("health"):
                if allowed(spec.name, config):
                    out.add(table.families[spec.name], labels, 1.0 if healthy else 0.0)
    if amd_count and "amd" in config.naming_sets and allowed(AMD_NODE_FAMILY.name, config):
        out.add(AMD_NODE_FAMILY, {"hostname": hostname, **extra}, float(amd_count))
    return BuildResult(out, unhealthy, dropped)


class StaticCollector:
    """A custom collector over fixed metric objects (never the process-global registry)."""

    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


def render(metrics: list[Metric]) -> bytes:
    """Prometheus text exposition 0.0.4 of `metrics`."""
    return generate_latest(StaticCollector(metrics))
