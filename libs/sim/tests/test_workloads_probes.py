"""Probes on `process` pods: a container whose port never opens is killed, and only after its budget.

Timing is asserted in the safe direction only: a kill is never observed sooner than the budget the
probes give after the pod was created (the container starts later still), and the probe state the
kubelet computed says the same. How much later the kill comes depends on the machine's load.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import EVENTS, PODS, KubeRest

NS = "default"
IMAGE = "test/sleeper:1"
CLOSED_PORT = 18097  # nothing on the node listens here
TCP = {"tcpSocket": {"port": CLOSED_PORT}}
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    commands = {"test/sleeper": [sys.executable, "-c", "import time; time.sleep(3600)"]}
    with SimCluster(profiles=["cpu-only"], pods="process", image_commands=commands) as sim:
        yield sim


def sleeper(name: str, **probes: Any) -> dict[str, Any]:
    container = {"name": "main", "image": IMAGE, **probes}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
    }


def restarts(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return int(statuses[0]["restartCount"]) if statuses else 0


def events_for(api: KubeRest, name: str) -> list[dict[str, Any]]:
    events, _ = api.list(EVENTS, NS, fieldSelector=f"involvedObject.name={name}")
    return events


def create_and_wait_for_first_kill(cluster: SimCluster, pod: dict[str, Any]) -> tuple[float, float, float]:
    """Monotonic times: pod created, earliest kill the kubelet computed, first restart seen."""
    api = cluster.api()
    name = pod["metadata"]["name"]
    created = time.monotonic()
    api.create(PODS, pod, NS)
    kubelets = cluster.kubelets
    assert kubelets is not None

    def earliest() -> float | None:
        worker = kubelets.worker_for(api.get(PODS, name, NS))
        return None if worker is None else worker.earliest_probe_kills().get("main")

    earliest_kill = float(cluster.wait_for(earliest, timeout=60, what=f"{name} running"))
    first = cluster.wait_for_object(PODS, name, NS, lambda p: restarts(p) >= 1, timeout=120)
    seen = time.monotonic()
    assert seen >= earliest_kill, "killed sooner than its own probe budget"
    assert first["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "Error"
    return created, earliest_kill, seen


def test_liveness_kills_a_container_only_after_initial_delay_plus_period_times_threshold(
    cluster: SimCluster,
) -> None:
    live = {**TCP, "initialDelaySeconds": 2, "periodSeconds": 2, "failureThreshold": 3}
    created, earliest, seen = create_and_wait_for_first_kill(cluster, sleeper("no-port", livenessProbe=live))
    assert seen - created >= 2 + 2 * 3
    assert earliest >= created + 2 + 2 * 3
    reasons = {
        (e["reason"], e["type"], e["message"].split(":")[0]) for e in events_for(cluster.api(), "no-port")
    }
    assert ("Unhealthy", "Warning", "Liveness probe failed") in reasons
    killing = [e for e in events_for(cluster.api(), "no-port") if e["reason"] == "Killing"]
    assert killing and killing[0]["message"] == "Container main failed liveness probe, will be restarted"
    assert killing[0]["involvedObject"]["fieldPath"] == "spec.containers{main}"
    assert killing[0]["source"]["component"] == "kubelet"
    unhealthy = next(e for e in events_for(cluster.api(), "no-port") if e["reason"] == "Unhealthy")
    assert str(CLOSED_PORT) in unhealthy["message"]  # the probe's own error, as `kubectl describe` shows


def test_startup_probe_holds_off_liveness_until_its_own_budget_is_spent(cluster: SimCluster) -> None:
    # Liveness alone would kill after 1 s; the startup probe gives the container 6 s first.
    startup = {**TCP, "periodSeconds": 1, "failureThreshold": 6}
    live = {**TCP, "periodSeconds": 1, "failureThreshold": 1}
    pod = sleeper("slow-start", startupProbe=startup, livenessProbe=live)
    created, earliest, seen = create_and_wait_for_first_kill(cluster, pod)
    assert seen - created >= 1 * 6
    assert earliest >= created + 1 * 6
    messages = [e["message"] for e in events_for(cluster.api(), "slow-start") if e["reason"] == "Killing"]
    assert messages and messages[0] == "Container main failed startup probe, will be restarted"
    pod_now = cluster.api().get(PODS, "slow-start", NS)
    assert pod_now["status"]["containerStatuses"][0]["started"] is False
