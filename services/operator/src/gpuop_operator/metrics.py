"""The operator's Prometheus metrics, on its own registry (served on the probe port's /metrics)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class OperatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.reconciles = Counter(
            "gpuop_operator_reconciles", "Reconcile passes over all DeviceConfigs.", registry=self.registry
        )
        self.errors = Counter(
            "gpuop_operator_reconcile_errors",
            "API errors during reconciles, by kind of write.",
            ["kind"],
            registry=self.registry,
        )
        self.writes = Counter(
            "gpuop_operator_api_writes",
            "Writes sent to the API server, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "gpuop_operator_reconcile_duration_seconds",
            "Duration of one reconcile pass.",
            registry=self.registry,
        )
        self.nodes = Gauge(
            "gpuop_operator_nodes",
            "Nodes per DeviceConfig and lifecycle stage.",
            ["deviceconfig", "stage"],
            registry=self.registry,
        )
        self.deviceconfig_ready = Gauge(
            "gpuop_operator_deviceconfig_ready",
            "1 when the DeviceConfig's Ready condition is True.",
            ["deviceconfig"],
            registry=self.registry,
        )
        self.leader = Gauge(
            "gpuop_operator_leader", "1 while this replica is the leader.", registry=self.registry
        )
        self.driver_nodes = Gauge(
            "gpuop_operator_driver_nodes",
            "Nodes per DeviceConfig and driver state (installing, installed, upgrade states).",
            ["deviceconfig", "state"],
            registry=self.registry,
        )
        self.driver_upgrade_seconds = Histogram(
            "gpuop_operator_driver_upgrade_duration_seconds",
            "Time one node's driver upgrade took, from cordon to upgrade-done.",
            buckets=(30, 60, 120, 300, 600, 900, 1800, 3600, 7200),
            registry=self.registry,
        )
        self.remediation_runs = Counter(
            "gpuop_operator_remediation_runs",
            "Finished node remediation runs, by result (recovered, failed, rate-limited).",
            ["result"],
            registry=self.registry,
        )
        self.remediation_nodes = Gauge(
            "gpuop_operator_remediation_nodes",
            "Nodes per DeviceConfig and remediation state (detected ... recovered, failed).",
            ["deviceconfig", "state"],
            registry=self.registry,
        )
        self._seen: set[tuple[str, str]] = set()
        self._driver_seen: set[tuple[str, str]] = set()
        self._remediation_seen: set[tuple[str, str]] = set()

    def set_stages(self, owner: str, stages: Mapping[str, int]) -> None:
        for key in [k for k in self._seen if k[0] == owner and k[1] not in stages]:
            self.nodes.remove(*key)
            self._seen.discard(key)
        for stage, count in stages.items():
            self.nodes.labels(owner, stage).set(count)
            self._seen.add((owner, stage))

    def set_driver_states(self, owner: str, states: Mapping[str, int]) -> None:
        for key in [k for k in self._driver_seen if k[0] == owner and k[1] not in states]:
            self.driver_nodes.remove(*key)
            self._driver_seen.discard(key)
        for state, count in states.items():
            self.driver_nodes.labels(owner, state).set(count)
            self._driver_seen.add((owner, state))

    def set_remediation_states(self, owner: str, states: Mapping[str, int]) -> None:
        for key in [k for k in self._remediation_seen if k[0] == owner and k[1] not in states]:
            self.remediation_nodes.remove(*key)
            self._remediation_seen.discard(key)
        for state, count in states.items():
            self.remediation_nodes.labels(owner, state).set(count)
            self._remediation_seen.add((owner, state))

    def forget(self, owner: str) -> None:
        self.set_stages(owner, {})
        self.set_driver_states(owner, {})
        self.set_remediation_states(owner, {})
        with contextlib.suppress(KeyError):
            self.deviceconfig_ready.remove(owner)
