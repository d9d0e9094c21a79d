"""The labeller's own Prometheus metrics, served on the probe port's /metrics.

They make the steady-state promise checkable in production: `label_patches_total` must stay flat
while nothing changes on the node.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class LabellerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.passes = Counter(
            "gpuop_node_labeller_passes",
            "Labelling passes, by result (ok, failed).",
            ["result"],
            registry=self.registry,
        )
        self.patches = Counter(
            "gpuop_node_labeller_label_patches", "Node PATCHes sent (one per change).", registry=self.registry
        )
        self.labels = Gauge(
            "gpuop_node_labeller_labels", "Labels the labeller owns on its node.", registry=self.registry
        )
        self.gpus = Gauge("gpuop_node_labeller_gpus", "GPUs seen in the last pass.", registry=self.registry)
        self.unhealthy = Gauge(
            "gpuop_node_labeller_unhealthy_gpus",
            "GPUs the GPUHealthy condition names as unhealthy.",
            registry=self.registry,
        )
        self.condition_patches = Counter(
            "gpuop_node_labeller_condition_patches",
            "nodes/status PATCHes of the GPUHealthy condition (one per change).",
            registry=self.registry,
        )
