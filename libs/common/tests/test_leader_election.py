"""Lease leader election against the simulated API server: one leader, takeover, release, races."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest
from gpuop_common.leader import LeaderElector, LeaseConfig
from gpuop_common.shutdown import Stopping
from kubernetes import client

FAST = {"lease_duration": 1.0, "renew_deadline": 0.6, "retry_period": 0.05}


def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    event = threading.Event()
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        event.wait(0.01)


class Timeline:
    """Leadership intervals per identity, from the callbacks."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.intervals: dict[str, list[list[float]]] = {}

    def callbacks(self, identity: str) -> dict[str, Callable[[], None]]:
        def started() -> None:
            with self.lock:
                self.intervals.setdefault(identity, []).append([time.monotonic(), float("inf")])

        def stopped() -> None:
            with self.lock:
                self.intervals[identity][-1][1] = time.monotonic()

        return {"on_started_leading": started, "on_stopped_leading": stopped}

    def overlaps(self) -> list[tuple[str, str]]:
        spans = [(who, s, e) for who, items in self.intervals.items() for s, e in items]
        return [(a, b) for a, s1, e1 in spans for b, s2, e2 in spans if a < b and s1 < e2 and s2 < e1]


@pytest.fixture
def coordination(kube_api_client: client.ApiClient) -> client.CoordinationV1Api:
    return client.CoordinationV1Api(kube_api_client)


@pytest.fixture
def running() -> Iterator[list[tuple[Stopping, threading.Thread]]]:
    started: list[tuple[Stopping, threading.Thread]] = []
    yield started
    for stopping, thread in started:
        stopping.set()
        thread.join(5)


def _holder(coordination: client.CoordinationV1Api) -> str:
    lease = coordination.read_namespaced_lease("gpuop-test", "default")
    assert lease.spec is not None
    return lease.spec.holder_identity or ""


def _elector(api: client.ApiClient, identity: str, timeline: Timeline | None = None) -> LeaderElector:
    callbacks = timeline.callbacks(identity) if timeline else {}
    return LeaderElector(
        api, LeaseConfig(name="gpuop-test", namespace="default", identity=identity, **FAST), **callbacks
    )


def _start(elector: LeaderElector, running: list[tuple[Stopping, threading.Thread]]) -> Stopping:
    stopping = Stopping()
    running.append((stopping, elector.start_in_thread(stopping)))
    return stopping


@pytest.mark.slow
def test_exactly_one_of_two_leads(
    kube_api_client: client.ApiClient,
    coordination: client.CoordinationV1Api,
    running: list[tuple[Stopping, threading.Thread]],
) -> None:
    timeline = Timeline()
    a, b = _elector(kube_api_client, "a", timeline), _elector(kube_api_client, "b", timeline)
    _start(a, running)
    _start(b, running)
    wait_for(lambda: a.is_leader or b.is_leader)
    leader = "a" if a.is_leader else "b"
    # Let several renew rounds pass (each elector reads and writes the lease every 50 ms).
    renewals_seen: set[str] = set()

    def renewed_a_few_times() -> bool:
        lease = coordination.read_namespaced_lease("gpuop-test", "default")
        assert lease.spec is not None and lease.spec.renew_time is not None
        renewals_seen.add(lease.spec.renew_time.isoformat())
        return len(renewals_seen) >= 5

    wait_for(renewed_a_few_times)
    assert a.is_leader != b.is_leader
    assert _holder(coordination) == leader
    assert timeline.overlaps() == []


@pytest.mark.slow
def test_takeover_after_leader_stops_renewing(
    kube_api_client: client.ApiClient,
    coordination: client.CoordinationV1Api,
    running: list[tuple[Stopping, threading.Thread]],
) -> None:
    hung = _elector(kube_api_client, "hung")
    assert hung.try_acquire_or_renew() is True  # leads once, then never renews (a wedged process)
    successor = _elector(kube_api_client, "successor")
    started = time.monotonic()
    _start(successor, running)

    wait_for(lambda: successor.is_leader)

    assert time.monotonic() - started >= FAST["lease_duration"] * 0.9  # waited for expiry
    assert _holder(coordination) == "successor"
    lease = coordination.read_namespaced_lease("gpuop-test", "default")
    assert lease.spec is not None and lease.spec.lease_transitions == 1
    assert hung.try_acquire_or_renew() is False  # the old holder cannot grab it back


@pytest.mark.slow
def test_leader_that_cannot_renew_steps_down_before_takeover(
    kube_api_client: client.ApiClient, running: list[tuple[Stopping, threading.Thread]]
) -> None:
    timeline = Timeline()
    first = _elector(kube_api_client, "first", timeline)
    _start(first, running)
    wait_for(lambda: first.is_leader)
    # Another candidate grabs the lease behind the leader's back (as after a network partition).
    intruder = _elector(kube_api_client, "intruder", timeline)
    lease_api = client.CoordinationV1Api(kube_api_client)
    lease = lease_api.read_namespaced_lease("gpuop-test", "default")
    assert lease.spec is not None
    lease.spec.holder_identity = "intruder"
    lease_api.replace_namespaced_lease("gpuop-test", "default", lease)
    wait_for(lambda: not first.is_leader)
    assert intruder.is_leader is False


@pytest.mark.slow
def test_release_on_stop_lets_successor_lead_at_once(
    kube_api_client: client.ApiClient,
    coordination: client.CoordinationV1Api,
    running: list[tuple[Stopping, threading.Thread]],
) -> None:
    timeline = Timeline()
    first = _elector(kube_api_client, "first", timeline)
    first_stopping = _start(first, running)
    wait_for(lambda: first.is_leader)
    second = _elector(kube_api_client, "second", timeline)
    _start(second, running)

    first_stopping.set()
    running[0][1].join(5)
    assert not first.is_leader
    assert timeline.intervals["first"][-1][1] != float("inf")  # on_stopped_leading ran
    released_at = time.monotonic()
    wait_for(lambda: second.is_leader)
    assert time.monotonic() - released_at < FAST["lease_duration"]
    assert _holder(coordination) == "second"
    assert timeline.overlaps() == []


def test_racing_candidates_exactly_one_wins(
    kube_api_client: client.ApiClient, coordination: client.CoordinationV1Api
) -> None:
    for round_number in range(10):
        electors = [_elector(kube_api_client, f"c{round_number}-{i}") for i in range(3)]
        barrier = threading.Barrier(len(electors))
        results: dict[str, bool] = {}

        def campaign(elector: LeaderElector, barrier: threading.Barrier, results: dict[str, bool]) -> None:
            barrier.wait(5)
            results[elector.lease.identity] = elector.try_acquire_or_renew()

        threads = [threading.Thread(target=campaign, args=(e, barrier, results)) for e in electors]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        winners = [identity for identity, won in results.items() if won]
        assert len(winners) == 1, results
        assert _holder(coordination) == winners[0]
        # Free the lease for the next round, as a stopping leader would.
        assert next(e for e in electors if e.lease.identity == winners[0]).release() is True


def test_lease_config_is_checked() -> None:
    with pytest.raises(ValueError, match="retry_period < renew_deadline < lease_duration"):
        LeaseConfig(name="l", namespace="n", identity="i", lease_duration=5, renew_deadline=10)
    with pytest.raises(ValueError, match="identity"):
        LeaseConfig(name="l", namespace="n", identity="")
