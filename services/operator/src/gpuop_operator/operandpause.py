"""Pausing a node's GPU operands around work that needs the GPUs to itself (pure).

The driver upgrade and uninstall (the driver module is replaced), remediation (a GPU reset: the
driver refuses it while any process holds the GPU open, and the labeller, exporter, device plugin,
DRA driver and test runner all do) and the config manager (a repartition) use the same mechanism:
each running operand's deploy label `gpuop.dev/deploy.<service>=true` is set to
`paused-for-<reason>` (its DaemonSet no longer selects the node, so its pod goes), the labels paused
are listed in one annotation of the walk, and resuming sets back to `true` exactly those still
carrying this walk's value (never an operand someone else paused meanwhile).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from gpuop_common.nodemeta import DEPLOY_LABEL_PREFIX, PAUSED_PREFIX, deploy_label

from gpuop_operator.model import STAGES, NodeInfo


@dataclass(frozen=True)
class OperandPause:
    """One walk's pause: its label value and the annotation listing what it paused."""

    reason: str  # `driver-upgrade`, `remediation`
    annotation: str  # comma-separated deploy labels this walk paused

    @property
    def value(self) -> str:
        return f"{PAUSED_PREFIX}{self.reason}"

    def running(self, node: NodeInfo) -> list[str]:
        """Deploy labels of the operands still deployed on the node (in rollout order)."""
        return [
            deploy_label(service)
            for stage in STAGES
            for service in stage
            if node.labels.get(deploy_label(service)) == "true"
        ]

    def paused(self, node: NodeInfo) -> list[str]:
        return [s for s in node.annotations.get(self.annotation, "").split(",") if s]

    def pause(self, node: NodeInfo) -> tuple[dict[str, str | None], dict[str, str | None]]:
        """(labels, annotations) that pause every running operand; empty labels when none runs."""
        running = self.running(node)
        if not running:
            return {}, {}
        listed = ",".join(sorted({*self.paused(node), *running}))
        return dict.fromkeys(running, self.value), {self.annotation: listed}

    def left(self, node: NodeInfo, operand_pods: Collection[tuple[str, str]]) -> list[str]:
        """Services this walk paused whose pods are still on the node (node, service)."""
        services = {label.removeprefix(DEPLOY_LABEL_PREFIX) for label in self.paused(node)}
        return sorted(s for (n, s) in operand_pods if n == node.name and s in services)

    def resumed(self, node: NodeInfo) -> dict[str, str | None]:
        """The deploy labels this walk paused, set back to "true" (not one someone else paused)."""
        return {label: "true" for label in self.paused(node) if node.labels.get(label) == self.value}
