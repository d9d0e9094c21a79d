"""The config manager's own Prometheus metrics, served on the probe port's /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ConfigManagerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.applies = Counter(
            "gpuop_config_manager_applies",
            "Finished profile applications, by result (success, failed).",
            ["result"],
            registry=self.registry,
        )
        self.state = Gauge(
            "gpuop_config_manager_state",
            "1 for the node's current configuration state, 0 for the others.",
            ["state"],
            registry=self.registry,
        )
        self.apply_seconds = Histogram(
            "gpuop_config_manager_apply_seconds",
            "Seconds from quiesce start to verified GPUs.",
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
            registry=self.registry,
        )
        self.passes = Counter(
            "gpuop_config_manager_passes",
            "Passes, by result (ok, error).",
            ["result"],
            registry=self.registry,
        )
