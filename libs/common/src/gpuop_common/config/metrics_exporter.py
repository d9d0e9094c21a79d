"""`metricsExporter`: the Prometheus exporter, its metric naming and health thresholds."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from gpuop_common.config.base import AbsolutePath, ConfigModel, Duration, ImageSettings, LabelKey, LabelValue

NamingSet = Literal["amd", "dcgm", "neutral"]
ALL_NAMING_SETS: tuple[NamingSet, ...] = ("amd", "dcgm", "neutral")

MetricName = Annotated[str, Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", max_length=200)]
PrometheusLabel = Annotated[str, Field(pattern=r"^[a-zA-Z_][a-zA-Z0-9_]*$", max_length=100)]


class HealthThreshold(ConfigModel):
    """A GPU is unhealthy while `metric` is above `max` (or below `min`)."""

    metric: MetricName = Field(description="Metric name as exported, e.g. gpu_ecc_uncorrect_total.")
    max: float | None = Field(None, description="Unhealthy when the value is greater than this.")
    min: float | None = Field(None, description="Unhealthy when the value is less than this.")

    @model_validator(mode="after")
    def _has_a_bound(self) -> HealthThreshold:
        if self.max is None and self.min is None:
            raise ValueError(f"threshold for {self.metric}: set max, min or both")
        if self.max is not None and self.min is not None and self.min > self.max:
            raise ValueError(f"threshold for {self.metric}: min {self.min} is greater than max {self.max}")
        return self


class ServiceMonitor(ConfigModel):
    """A monitoring.coreos.com/v1 ServiceMonitor for the exporter's Service."""

    enable: bool = Field(False, description="Create a ServiceMonitor (needs the Prometheus operator CRDs).")
    interval: Duration = Field("30s", description="Scrape interval, e.g. 30s.")
    honor_labels: bool = Field(
        True, description="Keep the exporter's labels when they clash with target labels."
    )
    labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, description="Extra labels on the ServiceMonitor (to match a Prometheus)."
    )


class MetricsExporterConfig(ImageSettings):
    """The GPU metrics exporter."""

    enable: bool = Field(True, description="Run the metrics exporter on selected nodes.")
    port: int = Field(5000, ge=1, le=65535, description="Port serving /metrics.")
    naming_sets: list[NamingSet] = Field(
        default_factory=lambda: list(ALL_NAMING_SETS),
        max_length=3,
        description="Metric name families: AMD device-metrics-exporter, NVIDIA dcgm-exporter, gpuop_.",
    )
    fields_allow: list[MetricName] = Field(
        default_factory=list, max_length=1024, description="Export only these metrics; empty exports all."
    )
    fields_deny: list[MetricName] = Field(
        default_factory=list, max_length=1024, description="Never export these metrics."
    )
    extra_labels: dict[PrometheusLabel, Annotated[str, Field(max_length=256)]] = Field(
        default_factory=dict, description="Static labels added to every metric, e.g. cluster_name."
    )
    health_thresholds: list[HealthThreshold] = Field(
        default_factory=list, max_length=256, description="Per-metric limits that mark a GPU unhealthy."
    )
    collection_interval_seconds: int = Field(
        15, ge=1, le=3600, description="Seconds between reads of the GPU counters."
    )
    pod_resource_api_socket_path: AbsolutePath = Field(
        "/var/lib/kubelet/pod-resources",
        alias="podResourceAPISocketPath",
        description="Kubelet pod-resources directory, for pod attribution.",
    )
    service_monitor: ServiceMonitor = Field(
        default_factory=ServiceMonitor, description="Prometheus operator ServiceMonitor."
    )

    @model_validator(mode="after")
    def _allow_and_deny_disjoint(self) -> MetricsExporterConfig:
        both = sorted(set(self.fields_allow) & set(self.fields_deny))
        if both:
            raise ValueError(f"fieldsDeny: {', '.join(both)} also listed in fieldsAllow")
        return self
