"""Convergence under injected API faults and dropped watches; restart mid-rollout; leader election."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from gpuop_common.leader import LeaderElector, LeaseConfig
from gpuop_common.shutdown import Stopping
from gpuop_operator.kubeio import DEVICECONFIGS as OPERATOR_DEVICECONFIGS
from gpuop_operator.kubeio import KubeJson
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, NODES, Resource

NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
FAULT_RESOURCES = ("nodes", "deviceconfigs", "configmaps", "events", "pods", "daemonsets")


def final_state(cluster: SimCluster) -> dict[str, Any]:
    """What a user sees once the rollout is done, minus timestamps and resourceVersions."""
    api = cluster.api()
    nodes, _ = api.list(NODES)
    node_state = {
        n["metadata"]["name"]: (
            {k: v for k, v in n["metadata"]["labels"].items() if k.startswith("gpuop.dev/deploy.")},
            {k: v for k, v in (n["metadata"].get("annotations") or {}).items() if k.startswith("gpuop.dev/")},
        )
        for n in nodes
    }
    dc = api.get(DEVICECONFIGS, "gpus", NAMESPACE)
    # observedGeneration differs by design: the faulty run edits the spec twice more.
    status = {k: v for k, v in dc["status"].items() if k not in ("conditions", "observedGeneration")}
    conditions = {c["type"]: (c["status"], c["reason"]) for c in dc["status"]["conditions"]}
    maps = {
        s: api.get(CONFIGMAPS, f"gpuop-{s}-config", NAMESPACE)["data"]
        for s in ("device-plugin", "node-labeller", "metrics-exporter")
    }
    return {"nodes": node_state, "status": status, "conditions": conditions, "configmaps": maps}


def is_done(cluster: SimCluster) -> bool:
    dc = cluster.api().get(DEVICECONFIGS, "gpus", NAMESPACE)
    conditions = {c["type"]: c for c in (dc.get("status") or {}).get("conditions") or []}
    ready = conditions.get("Ready", {})
    return bool(
        ready.get("status") == "True"
        and conditions.get("Progressing", {}).get("status") == "False"
        and dc["status"].get("observedGeneration") == dc["metadata"]["generation"]
    )


@contextmanager
def chaos(cluster: SimCluster, rate: float = 0.10, seed: int = 7) -> Iterator[dict[str, int]]:
    """Fail about `rate` of all requests (409, 500 or a hang past the client timeout) and drop every
    watch now and then, until the block ends."""
    server = cluster.server
    assert server is not None
    rng = random.Random(seed)
    stop = threading.Event()
    injected = {"faults": 0, "drops": 0}

    def served() -> int:
        return sum(server.stats().values())

    def run() -> None:
        last = served()
        ticks = 0
        while not stop.wait(0.02):
            now = served()
            for _ in range(int((now - last) * rate)):
                code = rng.choice((409, 500, 0))
                verb = rng.choice(("get", "list", "patch", "create"))
                server.faults.fail_next(verb, rng.choice(FAULT_RESOURCES), code, timeout=code == 0)
                injected["faults"] += 1
            if int((now - last) * rate):
                last = now
            ticks += 1
            if ticks % 25 == 0:
                server.faults.drop_watches()
                injected["drops"] += 1

    # Seed the queue so the operator's own first writes meet faults too, not only the busier
    # simulated controllers and kubelets.
    for resource in ("nodes", "deviceconfigs", "configmaps"):
        for code in (409, 500, 0):
            server.faults.fail_next("patch", resource, code, timeout=code == 0)
            injected["faults"] += 1
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield injected
    finally:
        stop.set()
        thread.join(timeout=5)
        server.faults.clear()


def retry_patch(cluster: SimCluster, kit: Any, patch: dict[str, Any]) -> None:
    """The test's own edits meet the same faults (hangs too): short timeout, repeat until one lands."""
    kube = KubeJson(kit.api_client_for(cluster), timeout=2.0)
    try:
        cluster.wait_for(
            lambda: kube.patch(OPERATOR_DEVICECONFIGS, "gpus", patch, NAMESPACE), timeout=60, what="spec edit"
        )
    finally:
        kube.api_client.close()


def exporter_labelled(cluster: SimCluster) -> bool | None:
    """True/False when every node has/lacks the exporter label, None while they differ."""
    nodes, _ = cluster.api().list(NODES)
    flags = {"gpuop.dev/deploy.metrics-exporter" in n["metadata"]["labels"] for n in nodes}
    return flags.pop() if len(flags) == 1 else None


SPEC = {"metricsExporter": {"port": 5001}, "nodeLabeller": {"enable": True}}


@pytest.mark.slow
def test_faults_and_dropped_watches_still_converge_to_the_fault_free_state(kit: Any) -> None:
    with SimCluster(amd_nodes=3, nvidia_nodes=2, pods="stub") as clean:
        kit.install_operands(clean.api())
        with kit.operator_running(clean):
            clean.api().create(DEVICECONFIGS, kit.device_config(spec=SPEC), NAMESPACE)
            clean.wait_for(lambda: is_done(clean), timeout=60, what="fault-free rollout")
            expected = final_state(clean)
    with SimCluster(amd_nodes=3, nvidia_nodes=2, pods="stub") as faulty:
        kit.install_operands(faulty.api())
        with kit.operator_running(faulty, timeout=2.0) as operator:
            with chaos(faulty) as injected:
                # Keep the operator busy while faults fly: roll out, turn the exporter off, then on.
                faulty.api().create(DEVICECONFIGS, kit.device_config(spec=SPEC), NAMESPACE)
                for enable in (False, True):
                    patch = {"spec": {"metricsExporter": {"enable": enable}}}
                    retry_patch(faulty, kit, patch)
                    faulty.wait_for(
                        lambda e=enable: exporter_labelled(faulty) == e,
                        timeout=120,
                        what=f"exporter {enable}",
                    )
            # Faults stop; whatever they broke is repaired by later passes and relists.
            faulty.wait_for(lambda: is_done(faulty), timeout=120, what="rollout after faults")
            faulty.wait_for(lambda: final_state(faulty) == expected, timeout=60, what="same final state")
        assert injected["faults"] > 10 and injected["drops"] > 0
        reconciler = operator.reconciler
        caches = (reconciler.nodes, reconciler.pods, reconciler.deviceconfigs, reconciler.configmaps)
        # The operator really met the faults: failed calls retried, broken watches resumed.
        assert sum(cache.resumes for cache in caches) >= len(caches)
        failed = sum(cache.failures for cache in caches) + sum(
            sample.value
            for sample in reconciler.metrics.errors.collect()[0].samples
            if sample.name.endswith("_total")
        )
        assert failed > 0


@pytest.mark.slow
def test_operator_restarted_mid_rollout_finishes_without_repeating_steps(kit: Any) -> None:
    with SimCluster(amd_nodes=3, nvidia_nodes=2, pods="stub") as cluster:
        kit.install_operands(cluster.api())
        cluster.api().create(DEVICECONFIGS, kit.device_config(spec=SPEC), NAMESPACE)
        first = kit.start_operator(cluster, loop=False)
        cluster.wait_for(first.reconciler.deviceconfigs.items, what="DeviceConfig cached")
        assert first.reconciler.reconcile_once()  # one pass: stage 2 labelled everywhere
        first.stop()  # the operator dies here
        labelled = {n.name for n in cluster.nodes}
        cluster.wait_for(
            lambda: all(
                cluster.api().get(NODES, n)["metadata"]["labels"].get("gpuop.dev/deploy.device-plugin")
                for n in labelled
            ),
            what="stage 2 labelled",
        )
        with kit.operator_running(cluster) as second:
            cluster.wait_for(lambda: is_done(cluster), timeout=60, what="rollout finished after restart")
            writes = second.reconciler.metrics.writes.labels("node")._value.get()
        # Exactly the remaining steps: the exporter label, then the ready mark, once per node.
        assert writes == 2 * len(cluster.nodes)


@pytest.mark.slow
def test_only_the_leader_acts(kit: Any) -> None:
    with SimCluster(amd_nodes=2, pods="stub") as cluster:
        kit.install_operands(cluster.api())
        replicas, stoppings = [], []
        for identity in ("replica-a", "replica-b"):
            op = kit.start_operator(cluster, leading=False)
            stopping = Stopping()
            elector = LeaderElector(
                op.api,
                LeaseConfig(
                    name="gpuop-operator",
                    namespace=NAMESPACE,
                    identity=identity,
                    lease_duration=3,
                    renew_deadline=2,
                    retry_period=0.5,
                ),
                on_started_leading=lambda r=op.reconciler: (r.leading.set(), r.dirty.set()),
                on_stopped_leading=op.reconciler.leading.clear,
            )
            elector.start_in_thread(stopping)
            replicas.append(op)
            stoppings.append(stopping)
        cluster.api().create(DEVICECONFIGS, kit.device_config(), NAMESPACE)
        cluster.wait_for(lambda: is_done(cluster), timeout=60, what="rollout by the leader")
        leaders = [op for op in replicas if op.reconciler.leading.is_set()]
        assert len(leaders) == 1
        follower = next(op for op in replicas if op is not leaders[0])
        assert follower.reconciler.passes == 0
        # The leader goes away: the follower takes over and keeps the state as it is (no writes needed).
        stoppings[replicas.index(leaders[0])].set("test")
        leaders[0].stop()
        cluster.wait_for(follower.reconciler.leading.is_set, timeout=20, what="follower takes over")
        cluster.wait_for(lambda: follower.reconciler.passes > 0, timeout=10, what="follower reconciles")
        assert follower.reconciler.metrics.writes.labels("node")._value.get() == 0
        stoppings[replicas.index(follower)].set("test")
        follower.stop()
