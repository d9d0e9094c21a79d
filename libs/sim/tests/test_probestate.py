"""Kubelet probe semantics of the simulated kubelet, driven with an explicit clock."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from gpuop_sim.workloads.simkubelet.probestate import (
    FAST_INTERVAL_S,
    ContainerProbes,
    ProbeKind,
    ProbeSpecError,
    ProbeTiming,
    container_probe_timings,
    probe_timing,
)

HTTP = {"httpGet": {"path": "/healthz", "port": 8080}}
STEP = 0.1  # the worker's tick


def probes_of(container: Mapping[str, Any], now: float = 0.0) -> ContainerProbes:
    return ContainerProbes.begin(container_probe_timings(container, "spec.containers[c]"), now)


def run_until_kill(state: ContainerProbes, start: float, limit: float, passing: bool = False) -> float | None:
    """Tick like the worker, every probe failing (or passing); the time of the kill, None if none."""
    now = start
    while now <= limit:
        for kind in state.due(now):
            if state.record(kind, passing, "dial tcp: connection refused", now).kill:
                return now
        now = round(now + STEP, 6)
    return None


def test_unset_fields_get_the_api_servers_defaults() -> None:
    assert probe_timing(ProbeKind.LIVENESS, HTTP, "p") == ProbeTiming(
        initial_delay=0, period=10, timeout=1, failure_threshold=3, success_threshold=1
    )
    zeroes = {**HTTP, "periodSeconds": 0, "failureThreshold": 0, "timeoutSeconds": 0}
    assert probe_timing(ProbeKind.READINESS, zeroes, "p") == ProbeTiming()


@pytest.mark.parametrize(
    ("kind", "probe", "field"),
    [
        (ProbeKind.LIVENESS, {"successThreshold": 2}, "livenessProbe.successThreshold"),
        (ProbeKind.STARTUP, {"successThreshold": 3}, "startupProbe.successThreshold"),
        (ProbeKind.READINESS, {"periodSeconds": -1}, "readinessProbe.periodSeconds"),
        (ProbeKind.READINESS, {"failureThreshold": "3"}, "readinessProbe.failureThreshold"),
        (ProbeKind.LIVENESS, {"initialDelaySeconds": True}, "livenessProbe.initialDelaySeconds"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(kind: ProbeKind, probe: dict[str, Any], field: str) -> None:
    container = {kind.field: {**HTTP, **probe}}
    with pytest.raises(ProbeSpecError, match=rf"spec\.containers\[c\]\.{field}:"):
        container_probe_timings(container, "spec.containers[c]")


def test_a_probe_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(ProbeSpecError, match=r"spec\.containers\[c\]\.livenessProbe: must be an object"):
        container_probe_timings({"livenessProbe": "yes"}, "spec.containers[c]")


def test_liveness_kills_only_after_initial_delay_plus_period_times_threshold() -> None:
    live = {**HTTP, "initialDelaySeconds": 5, "periodSeconds": 10, "failureThreshold": 3}
    state = probes_of({"livenessProbe": live}, now=100.0)
    assert state.earliest_kill() == 100.0 + 5 + 10 * 3
    assert state.due(104.9) == []
    assert state.due(105.0) == [ProbeKind.LIVENESS]
    killed = run_until_kill(state, 100.0, 200.0)
    assert killed is not None
    assert 135.0 <= killed < 135.0 + 2 * STEP


def test_defaults_give_liveness_thirty_seconds() -> None:
    state = probes_of({"livenessProbe": HTTP})
    assert state.earliest_kill() == 30.0
    killed = run_until_kill(state, 0.0, 60.0)
    assert killed is not None and 30.0 <= killed < 30.0 + 2 * STEP


def test_a_passing_liveness_probe_never_kills() -> None:
    state = probes_of({"livenessProbe": {**HTTP, "periodSeconds": 1, "failureThreshold": 1}})
    assert run_until_kill(state, 0.0, 60.0, passing=True) is None


def test_a_success_resets_the_consecutive_failures() -> None:
    state = probes_of({"livenessProbe": {**HTTP, "periodSeconds": 1, "failureThreshold": 3}})
    fail, ok = "connection refused", "HTTP 200"
    assert state.record(ProbeKind.LIVENESS, False, fail, 1.0).counted_failure
    assert not state.record(ProbeKind.LIVENESS, False, fail, 2.0).kill
    assert not state.record(ProbeKind.LIVENESS, True, ok, 3.0).kill
    assert not state.record(ProbeKind.LIVENESS, False, fail, 4.0).kill
    assert not state.record(ProbeKind.LIVENESS, False, fail, 5.0).kill
    assert state.record(ProbeKind.LIVENESS, False, fail, 6.0).kill
    assert state.last_message(ProbeKind.LIVENESS) == fail


def test_failures_sooner_than_the_period_do_not_count() -> None:
    state = probes_of({"livenessProbe": {**HTTP, "periodSeconds": 10, "failureThreshold": 2}})
    for now in (10.0, 10.5, 11.0, 19.9):
        assert not state.record(ProbeKind.LIVENESS, False, "refused", now).kill
    assert state.probes[ProbeKind.LIVENESS].failures == 1
    assert state.record(ProbeKind.LIVENESS, False, "refused", 20.0).kill


def test_startup_probe_gates_liveness_and_readiness_until_it_succeeds() -> None:
    container = {
        "startupProbe": {**HTTP, "periodSeconds": 2, "failureThreshold": 30},
        "livenessProbe": {**HTTP, "periodSeconds": 10, "failureThreshold": 3},
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 5},
    }
    state = probes_of(container)
    assert not state.started and not state.ready
    assert state.earliest_kill() == 60.0  # 2 s x 30
    assert state.due(0.0) == [ProbeKind.STARTUP]
    assert state.due(0.0 + 100) == [ProbeKind.STARTUP]  # never liveness/readiness while starting
    # A slow start: the port opens after 45 s, well past the liveness budget alone (30 s).
    now = 0.0
    while now < 45.0:
        for kind in state.due(now):
            assert not state.record(kind, False, "connection refused", now).kill
        now = round(now + STEP, 6)
    assert not state.started
    state.record(ProbeKind.STARTUP, True, "HTTP 200", 45.0)
    assert state.started and not state.ready
    # Liveness now gets its own full budget, counted from the startup success.
    assert state.earliest_kill() == 45.0 + 30.0
    assert set(state.due(45.0)) == {ProbeKind.LIVENESS, ProbeKind.READINESS}
    state.record(ProbeKind.READINESS, True, "HTTP 200", 45.0)
    assert state.ready


def test_startup_failing_its_threshold_kills_after_its_budget() -> None:
    state = probes_of({"startupProbe": {**HTTP, "periodSeconds": 2, "failureThreshold": 30}}, now=7.0)
    killed = run_until_kill(state, 7.0, 200.0)
    assert killed is not None and 67.0 <= killed < 67.0 + 2 * STEP


def test_startup_probe_runs_faster_than_its_period_so_success_is_seen_sooner() -> None:
    state = probes_of({"startupProbe": {**HTTP, "periodSeconds": 10}})
    state.record(ProbeKind.STARTUP, False, "refused", 0.0)
    assert state.due(FAST_INTERVAL_S)
    state.record(ProbeKind.STARTUP, True, "HTTP 200", FAST_INTERVAL_S)
    assert state.started and state.ready  # no readiness probe: ready once started


def test_readiness_needs_success_threshold_successes_and_failure_threshold_failures() -> None:
    ready = {**HTTP, "periodSeconds": 1, "successThreshold": 2, "failureThreshold": 2}
    state = probes_of({"readinessProbe": ready})
    assert state.started and not state.ready
    state.record(ProbeKind.READINESS, True, "ok", 0.0)
    assert not state.ready
    state.record(ProbeKind.READINESS, True, "ok", 0.5)
    assert state.ready
    assert state.record(ProbeKind.READINESS, False, "503", 1.0).counted_failure
    assert state.ready  # one failure of two
    assert not state.record(ProbeKind.READINESS, False, "503", 1.5).counted_failure  # within the period
    assert state.ready
    state.record(ProbeKind.READINESS, False, "503", 2.0)
    assert not state.ready
    assert not state.record(ProbeKind.READINESS, False, "503", 3.0).kill  # readiness never kills
    state.record(ProbeKind.READINESS, True, "ok", 3.5)
    assert not state.ready
    state.record(ProbeKind.READINESS, True, "ok", 4.0)
    assert state.ready


def test_readiness_respects_its_initial_delay_but_polls_faster_than_its_period() -> None:
    state = probes_of({"readinessProbe": {**HTTP, "initialDelaySeconds": 3, "periodSeconds": 10}})
    assert state.due(2.9) == []
    assert state.due(3.0) == [ProbeKind.READINESS]
    state.record(ProbeKind.READINESS, False, "refused", 3.0)
    assert state.due(3.0 + FAST_INTERVAL_S) == [ProbeKind.READINESS]


def test_a_restart_starts_every_counter_over() -> None:
    container = {"livenessProbe": {**HTTP, "periodSeconds": 1, "failureThreshold": 2}}
    first = probes_of(container, now=0.0)
    assert run_until_kill(first, 0.0, 10.0) is not None
    restarted = probes_of(container, now=50.0)
    assert restarted.probes[ProbeKind.LIVENESS].failures == 0
    assert restarted.earliest_kill() == 52.0
    killed = run_until_kill(restarted, 50.0, 60.0)
    assert killed is not None and killed >= 52.0


def test_no_probes_means_started_ready_and_never_killed() -> None:
    state = probes_of({})
    assert state.started and state.ready
    assert state.earliest_kill() is None
    assert state.due(100.0) == []
