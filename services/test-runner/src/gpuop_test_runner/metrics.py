"""The test runner's Prometheus metrics, served on the probe port's /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Validation runs take from under a second (self-check) to hours (burn-ins).
DURATION_BUCKETS = (0.1, 0.5, 1, 5, 30, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400)


class TestRunnerMetrics:
    __test__ = False  # not a pytest test class

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.runs = Counter(
            "gpuop_test_runs",
            "Finished test runs, by recipe and result (Passed, Failed, TimedOut, ToolMissing, Aborted).",
            ["recipe", "result"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "gpuop_test_run_duration_seconds",
            "Wall time of test runs, by recipe.",
            ["recipe"],
            buckets=DURATION_BUCKETS,
            registry=self.registry,
        )
        self.last_result = Gauge(
            "gpuop_test_last_result",
            "Last verdict per GPU and recipe: 1 passed, 0 failed.",
            ["gpu", "gpu_index", "recipe"],
            registry=self.registry,
        )
        self.running = Gauge("gpuop_test_runs_running", "Test runs in progress.", registry=self.registry)
