"""A 50-node rolling upgrade with reboots, through the real reconciler in a stub-pod cluster.

Driver Jobs run for a simulated half second (the stub outcome hook); a reboot Job's pod reboots its
node, as `reboot` on the host would (new bootID, NotReady for a moment). One node's upgrade Job
fails. A watcher checks `maxParallelUpgrades: 5` and `maxUnavailableNodes: 20%` on every Node
event, counting nodes NotReady or cordoned by anyone, not only at the end.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from gpuop_operator.driverflow import VERSION_LABEL
from gpuop_operator.upgrade import IN_FLIGHT, STATE_LABEL, UpgradeState, parse_state
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import NODES, Resource
from gpuop_sim.workloads.objects import Obj
from gpuop_sim.workloads.simkubelet.stub import StubOutcome
from kubernetes import client, config, watch

pytestmark = pytest.mark.slow
NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
SIZE = 50
FAILING = "amd-17"


class Outcomes:
    """Stub driver Jobs: half a second each; the reboot Job reboots its node; FAILING's build fails."""

    def __init__(self) -> None:
        self.cluster: SimCluster | None = None
        self.upgrading = False

    def __call__(self, pod: Obj) -> StubOutcome | None:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if labels.get("app.kubernetes.io/component") != "driver-job":
            return None
        node = str((pod.get("spec") or {}).get("nodeName", ""))
        if labels.get("gpuop.dev/operation") == "node-reboot":
            assert self.cluster is not None
            threading.Timer(0.3, self.cluster.reboot_node, args=(node,), kwargs={"down_seconds": 0.5}).start()
            return StubOutcome(duration_s=30.0)  # killed by the reboot first
        if self.upgrading and node == FAILING:
            return StubOutcome(duration_s=0.5, exit_code=2, termination_message="not a summary")
        return StubOutcome(duration_s=0.5)


@pytest.fixture(scope="module")
def cluster(kit: Any) -> Iterator[tuple[SimCluster, Outcomes]]:
    outcomes = Outcomes()
    with SimCluster(amd_nodes=SIZE, pods="stub", stub_outcome=outcomes) as sim:
        outcomes.cluster = sim
        kit.install_operands(sim.api())
        for node in sim.nodes:
            sim.api().patch(NODES, node.name, {"status": {"allocatable": {"amd.com/gpu": "8"}}}, sub="status")
        yield sim, outcomes


class BoundsWatcher:
    def __init__(self, cluster: SimCluster, parallel: int, unavailable: int) -> None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        self.api = client.ApiClient(configuration)
        self.parallel, self.unavailable = parallel, unavailable
        self.nodes: dict[str, tuple[UpgradeState | None, bool, bool]] = {}
        self.violations: list[str] = []
        self.widest = 0
        self.events = 0
        self.watch = watch.Watch()  # type: ignore[no-untyped-call]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        with contextlib.suppress(urllib3.exceptions.HTTPError, OSError):
            for event in self.watch.stream(client.CoreV1Api(self.api).list_node, timeout_seconds=600):
                node = event["object"]
                ready = any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
                state = parse_state((node.metadata.labels or {}).get(STATE_LABEL))
                self.nodes[node.metadata.name] = (state, bool(node.spec.unschedulable), ready)
                self.events += 1
                in_flight = sum(1 for s, _, _ in self.nodes.values() if s in IN_FLIGHT)
                down = sum(
                    1
                    for s, cordoned, ready in self.nodes.values()
                    if s in IN_FLIGHT or s is UpgradeState.FAILED or cordoned or not ready
                )
                self.widest = max(self.widest, in_flight)
                if in_flight > self.parallel or down > self.unavailable:
                    self.violations.append(f"{in_flight} in flight, {down} unavailable")

    def stop(self) -> None:
        self.watch.stop()
        self.api.close()


def test_fifty_nodes_upgrade_with_reboots_within_the_bounds_on_every_event(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, outcomes = cluster
    api = sim.api()
    policy = {"maxParallelUpgrades": 5, "maxUnavailableNodes": "20%", "rebootRequired": True}
    spec = {"driver": {"enable": True, "version": "6.1", "upgradePolicy": policy}}
    with kit.operator_running(sim):
        api.create(DEVICECONFIGS, kit.device_config(spec=spec), NAMESPACE)
        sim.wait_for(
            lambda: (api.get(DEVICECONFIGS, "gpus", NAMESPACE).get("status") or {}).get("readyNodes") == SIZE,
            timeout=180,
            what="50 nodes installed and ready",
        )
        outcomes.upgrading = True
        watcher = BoundsWatcher(sim, 5, math.ceil(0.2 * SIZE))
        try:
            spec["driver"]["version"] = "6.2"
            api.patch(DEVICECONFIGS, "gpus", {"spec": spec}, NAMESPACE)

            def finished() -> bool:
                states = {
                    n["metadata"]["name"]: n["metadata"]["labels"].get(STATE_LABEL)
                    for n in api.list(NODES)[0]
                }
                return states.pop(FAILING) == "upgrade-failed" and set(states.values()) == {"upgrade-done"}

            sim.wait_for(finished, timeout=420, what="49 nodes upgrade-done and one failed")
        finally:
            watcher.stop()
    assert watcher.violations == [], watcher.violations[:5]
    assert watcher.widest == 5 and watcher.events > SIZE * 5
    nodes = {n["metadata"]["name"]: n for n in api.list(NODES)[0]}
    done = [n for name, n in nodes.items() if name != FAILING]
    assert all(n["metadata"]["labels"][VERSION_LABEL] == "6.2" for n in done)
    assert all(n["status"]["nodeInfo"]["bootID"] != n["metadata"]["name"] for n in done)  # each rebooted
    assert all(not n["spec"].get("unschedulable") for n in done)
    failed = nodes[FAILING]
    assert failed["metadata"]["labels"][VERSION_LABEL] == "6.1" and failed["spec"]["unschedulable"] is True
    assert "not a summary" in failed["metadata"]["annotations"]["gpuop.dev/driver.failure"]
