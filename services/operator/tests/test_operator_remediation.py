"""Node remediation through the real reconciler against a stub-pod simulated cluster.

The GPU fault is the labeller's Node condition `GPUHealthy=False`, set here through `nodes/status`
(strategic merge, as the labeller does). Remediation Jobs are stub pods with a simulated outcome
(the playbooks themselves are tested with ansible-runner elsewhere): the reset "clears" the GPU by
setting the condition True, or its summary says a reboot is needed and the reboot Job's pod reboots
the simulated node. A watcher sees every Node event and checks the bounds on each one.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
import urllib3
from gpuop_common.kubejson import STRATEGIC_MERGE_PATCH
from gpuop_operator.driverflow import VERSION_LABEL
from gpuop_operator.driverjob import DEFAULT_JOB_IMAGE, JobSettings
from gpuop_operator.jobresult import PlaybookSummary, TaskFailure
from gpuop_operator.model import REMEDIATION_ACTIVE
from gpuop_operator.remediation import APPROVED_LABEL, STATE_LABEL
from gpuop_operator.upgrade import IN_FLIGHT
from gpuop_operator.upgrade import STATE_LABEL as UPGRADE_STATE
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, DEPLOYMENTS, EVENTS, JOBS, NODES, PODS, Resource
from gpuop_sim.workloads.objects import Obj
from gpuop_sim.workloads.simkubelet.stub import StubOutcome
from kubernetes import client, config, watch

pytestmark = pytest.mark.slow
NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
NODE_NAMES = ("amd-0", "amd-1", "amd-2")
TAINT_KEY = "gpuop.dev/gpu-unhealthy"
IN_FLIGHT_VALUES = {s.value for s in IN_FLIGHT}


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def set_gpu_health(cluster: SimCluster, node: str, healthy: bool) -> None:
    condition = {
        "type": "GPUHealthy",
        "status": "True" if healthy else "False",
        "reason": "AsExpected" if healthy else "RasUncorrectable",
        "message": "all GPUs healthy" if healthy else "unhealthy GPUs: 0000:c1:00.0 (RasUncorrectable)",
        "lastTransitionTime": _now(),
        "lastHeartbeatTime": _now(),
    }
    body = {"status": {"conditions": [condition]}}
    cluster.api().patch(NODES, node, body, sub="status", content_type=STRATEGIC_MERGE_PATCH)


def summary(*, reboot: bool = False, failed: str = "") -> str:
    now = datetime.now(UTC)
    tasks = [TaskFailure(task="reset the GPUs", message=failed, stderr_tail=failed)] if failed else []
    return PlaybookSummary(
        playbook="gpu-reset",
        status="failed" if failed else "successful",
        rc=2 if failed else 0,
        failed_tasks=tasks,
        facts={"reboot_required": "true" if reboot else "false"},
        started_at=now,
        finished_at=now,
    ).to_termination_message()


def operand_pods_on(cluster: SimCluster, node: str) -> list[str]:
    pods, _ = cluster.api().list(PODS, NAMESPACE, fieldSelector=f"spec.nodeName={node}")
    return sorted(
        p["metadata"]["name"]
        for p in pods
        if any(ref.get("kind") == "DaemonSet" for ref in p["metadata"].get("ownerReferences") or [])
    )


@dataclass
class Outcomes:
    """How each node's remediation Jobs end: per node, reboot needed / failing reset / duration."""

    cluster: SimCluster | None = None
    needs_reboot: set[str] = field(default_factory=set)
    failing: set[str] = field(default_factory=set)
    reset_seconds: float = 0.3
    # Per reset Job pod started: the operand pods (gpuop DaemonSets) still on its node at that moment.
    operands_at_reset: list[list[str]] = field(default_factory=list)

    def __call__(self, pod: Obj) -> StubOutcome | None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if labels.get("app.kubernetes.io/component") != "driver-job":
            return None
        assert self.cluster is not None
        node = str((pod.get("spec") or {}).get("nodeName", ""))
        operation = labels.get("gpuop.dev/operation")
        if operation == "gpu-reset":
            self.operands_at_reset.append(operand_pods_on(self.cluster, node))
            if node in self.failing:
                message = summary(failed="amd-smi: GPU 0000:c1:00.0 reset failed: device busy")
                return StubOutcome(duration_s=self.reset_seconds, exit_code=1, termination_message=message)
            if node not in self.needs_reboot:  # what the labeller would see after a good reset
                threading.Timer(0.1, set_gpu_health, args=(self.cluster, node, True)).start()
            reboot = node in self.needs_reboot
            return StubOutcome(duration_s=self.reset_seconds, termination_message=summary(reboot=reboot))
        if operation == "node-reboot":

            def reboot() -> None:
                assert self.cluster is not None
                self.cluster.reboot_node(node, down_seconds=0.3)
                set_gpu_health(self.cluster, node, True)

            threading.Timer(0.2, reboot).start()
            return StubOutcome(duration_s=30.0)  # killed by the reboot first
        return StubOutcome(duration_s=0.2)


@pytest.fixture(scope="module")
def cluster(kit: Any) -> Iterator[tuple[SimCluster, Outcomes]]:
    outcomes = Outcomes()
    with SimCluster(amd_nodes=3, nvidia_nodes=0, cpu_nodes=0, pods="stub", stub_outcome=outcomes) as sim:
        outcomes.cluster = sim
        kit.install_operands(sim.api())
        for name in NODE_NAMES:
            sim.api().patch(NODES, name, {"status": {"allocatable": {"amd.com/gpu": "8"}}}, sub="status")
        yield sim, outcomes


class Watcher:
    """Every Node event: each node's remediation state walk, and the bounds on every event."""

    def __init__(self, cluster: SimCluster, max_parallel: int = 0) -> None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        self.api = client.ApiClient(configuration)
        self.max_parallel = max_parallel
        self.walks: dict[str, list[str]] = {}
        self.now: dict[str, tuple[str, str]] = {}  # node -> (remediation state, driver state)
        self.violations: list[str] = []
        self.widest = 0
        self.tainted_in: set[str] = set()  # states seen with our taint on the node
        self.watch = watch.Watch()  # type: ignore[no-untyped-call]
        self.listed = threading.Event()  # the first event arrived: the watch is open
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.listed.wait(30), "the node watch did not open"

    def _run(self) -> None:
        try:
            self._follow()
        except (urllib3.exceptions.HTTPError, OSError):
            pass  # stop() closes the connection under the stream
        except Exception as exc:  # a watcher that died must fail the test, not pass it
            self.violations.append(f"watcher failed: {exc!r}")

    def _follow(self) -> None:
        for event in self.watch.stream(client.CoreV1Api(self.api).list_node, timeout_seconds=600):
            node = event["object"]
            labels = node.metadata.labels or {}
            name = node.metadata.name
            state = labels.get(STATE_LABEL, "")
            walk = self.walks.setdefault(name, [])
            if state and (not walk or walk[-1] != state):
                walk.append(state)
            if any(t.key == TAINT_KEY for t in node.spec.taints or []):
                self.tainted_in.add(state)
            driver = labels.get(UPGRADE_STATE, "")
            self.now[name] = (state, driver)
            self.listed.set()
            if state in REMEDIATION_ACTIVE and driver in IN_FLIGHT_VALUES:
                self.violations.append(f"{name}: remediation {state} during driver {driver}")
            active = sum(1 for s, _ in self.now.values() if s in REMEDIATION_ACTIVE)
            self.widest = max(self.widest, active)
            if self.max_parallel and active > self.max_parallel:
                self.violations.append(f"{active} nodes in remediation")

    def stop(self) -> None:
        self.watch.stop()
        self.api.close()


def remediation(**settings: Any) -> dict[str, Any]:
    return {
        "remediation": {
            "enable": True,
            "conditionHoldSeconds": 0,
            "rateLimit": {"maxRunsPerWindow": 100, "windowSeconds": 3600},
            **settings,
        }
    }


def state_of(cluster: SimCluster, node: str) -> str | None:
    labels: dict[str, str] = cluster.api().get(NODES, node)["metadata"]["labels"]
    return labels.get(STATE_LABEL)


ORDER = ("detected", "awaiting-approval", "tainted", "draining", "repairing", "validating", "recovered")


def in_order(walk: list[str]) -> bool:
    """The states come in the workflow's order (some may be skipped: steps taken in one patch)."""
    positions = [ORDER.index(state) for state in walk]
    return positions == sorted(positions) and len(set(positions)) == len(positions)


def history(cluster: SimCluster, node: str) -> list[dict[str, Any]]:
    annotations = cluster.api().get(NODES, node)["metadata"].get("annotations") or {}
    runs: list[dict[str, Any]] = json.loads(annotations.get("gpuop.dev/remediation.history", "[]"))
    return runs


def wait_state(cluster: SimCluster, nodes: tuple[str, ...], state: str, timeout: float = 90) -> None:
    cluster.wait_for(
        lambda: all(state_of(cluster, n) == state for n in nodes), timeout=timeout, what=f"{nodes} {state}"
    )


def node_events(cluster: SimCluster, node: str) -> list[dict[str, Any]]:
    events, _ = cluster.api().list(EVENTS, "default")
    return [
        e for e in events if e["involvedObject"]["name"] == node and e["reason"].startswith("Remediation")
    ]


def event_counts(cluster: SimCluster, node: str) -> dict[str, int]:
    """Occurrences per reason (a recorder folds a repeat into its event's count)."""
    counts: dict[str, int] = {}
    for event in node_events(cluster, node):
        counts[event["reason"]] = counts.get(event["reason"], 0) + int(event.get("count") or 1)
    return counts


def jobs_added(cluster: SimCluster, since: str, operation: str) -> list[str]:
    """Nodes of the Jobs for `operation` created after resourceVersion `since` (watch history)."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    with client.ApiClient(configuration) as api:
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            client.BatchV1Api(api).list_namespaced_job, NAMESPACE, resource_version=since, timeout_seconds=1
        )
        return [
            e["object"].metadata.annotations["gpuop.dev/node"]
            for e in stream
            if e["type"] == "ADDED" and e["object"].metadata.labels.get("gpuop.dev/operation") == operation
        ]


def put_spec(cluster: SimCluster, kit: Any, spec: dict[str, Any]) -> None:
    api = cluster.api()
    try:
        api.get(DEVICECONFIGS, "gpus", NAMESPACE)
    except Exception:
        api.create(DEVICECONFIGS, kit.device_config(spec=spec), NAMESPACE)
        return
    api.patch(
        DEVICECONFIGS,
        "gpus",
        [{"op": "replace", "path": "/spec", "value": spec}],
        NAMESPACE,
        content_type="application/json-patch+json",
    )


def test_a_gpu_fault_is_repaired_by_reset_or_reboot_and_the_node_given_back(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, outcomes = cluster
    api = sim.api()
    outcomes.needs_reboot = {"amd-1"}
    _, since = api.list(JOBS, NAMESPACE)
    boot_before = api.get(NODES, "amd-1")["status"]["nodeInfo"]["bootID"]
    watcher = Watcher(sim)
    try:
        with kit.operator_running(sim, resync_interval=3600) as operator:
            put_spec(sim, kit, remediation(maxParallel=2))
            set_gpu_health(sim, "amd-0", False)
            set_gpu_health(sim, "amd-1", False)
            wait_state(sim, ("amd-0", "amd-1"), "recovered", timeout=120)
            dc = sim.wait_for_object(
                DEVICECONFIGS,
                "gpus",
                NAMESPACE,
                lambda d: (d.get("status") or {}).get("remediation", {}).get("states") == {"recovered": 2},
                timeout=30,
            )
            runs = operator.reconciler.metrics.remediation_runs.labels("recovered")._value.get()
    finally:
        watcher.stop()
        outcomes.needs_reboot = set()
    assert watcher.violations == []
    for name in ("amd-0", "amd-1"):
        # detected, tainted and draining are one patch; validated at once when nothing is missing.
        walk = watcher.walks[name]
        assert walk[0] == "draining" and walk[-1] == "recovered" and "repairing" in walk
        assert in_order(walk), walk
    assert watcher.tainted_in >= {"draining", "repairing"}
    assert "recovered" not in watcher.tainted_in
    for name in ("amd-0", "amd-1"):
        node = api.get(NODES, name)
        assert not node["spec"].get("unschedulable")
        assert not [t for t in node["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
    assert sorted(jobs_added(sim, since, "gpu-reset")) == ["amd-0", "amd-1"]
    assert jobs_added(sim, since, "node-reboot") == ["amd-1"]  # only the reset that asked for it
    assert api.get(NODES, "amd-1")["status"]["nodeInfo"]["bootID"] != boot_before
    job = api.get(JOBS, "gpuop-reset-amd-0", NAMESPACE)
    vars_json = job["spec"]["template"]["metadata"]["annotations"]["gpuop.dev/playbook-vars"]
    assert '"gpus":["0000:c1:00.0"]' in vars_json and '"vendor":"amd"' in vars_json
    history = dc["status"]["remediation"]["nodes"]["amd-1"]["history"]
    assert history[-1]["steps"] == ["drain", "reset", "reboot", "validate"]
    assert history[-1]["result"] == "recovered" and history[-1]["trigger"].startswith("GPUHealthy=False")
    assert dc["status"]["remediation"]["nodes"]["amd-0"]["history"][-1]["steps"] == [
        "drain",
        "reset",
        "validate",
    ]
    assert runs == 2
    reasons = [e["reason"] for e in node_events(sim, "amd-1")]
    assert {
        "RemediationDetected",
        "RemediationStarted",
        "RemediationRebooting",
        "RemediationSucceeded",
    } <= set(reasons)


def test_without_auto_start_the_node_waits_for_the_approval_then_the_rate_limit_stops_it(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, _ = cluster
    api = sim.api()
    _, since = api.list(JOBS, NAMESPACE)
    watcher = Watcher(sim)
    try:
        with kit.operator_running(sim):
            put_spec(
                sim,
                kit,
                remediation(autoStart=False, rateLimit={"maxRunsPerWindow": 1, "windowSeconds": 3600}),
            )
            set_gpu_health(sim, "amd-2", False)
            wait_state(sim, ("amd-2",), "awaiting-approval")
            node = api.get(NODES, "amd-2")
            assert not node["spec"].get("unschedulable") and jobs_added(sim, since, "gpu-reset") == []
            api.patch(NODES, "amd-2", {"metadata": {"labels": {APPROVED_LABEL: "true"}}})
            wait_state(sim, ("amd-2",), "recovered")
            assert APPROVED_LABEL not in api.get(NODES, "amd-2")["metadata"]["labels"]  # used up
            set_gpu_health(sim, "amd-2", False)  # the same GPU again: over maxRunsPerWindow
            wait_state(sim, ("amd-2",), "failed")
    finally:
        watcher.stop()
    walk = watcher.walks["amd-2"]
    assert walk[0] == "awaiting-approval" and walk[1] == "draining" and walk[-2:] == ["recovered", "failed"]
    assert in_order(walk[:-1]), walk
    node = api.get(NODES, "amd-2")
    assert node["spec"]["unschedulable"] is True
    assert [t for t in node["spec"]["taints"] if t["key"] == TAINT_KEY]  # left tainted for a person
    limited = [e for e in node_events(sim, "amd-2") if e["reason"] == "RemediationRateLimited"]
    assert limited and "rateLimit.maxRunsPerWindow 1" in limited[0]["message"]
    assert jobs_added(sim, since, "gpu-reset") == ["amd-2"]  # the refused run started nothing
    # A person gives the node back by removing the state label.
    set_gpu_health(sim, "amd-2", True)
    with kit.operator_running(sim):
        api.patch(NODES, "amd-2", {"metadata": {"labels": {STATE_LABEL: None}}})
        sim.wait_for(
            lambda: not api.get(NODES, "amd-2")["spec"].get("unschedulable"),
            timeout=30,
            what="amd-2 uncordoned",
        )
    assert not [t for t in api.get(NODES, "amd-2")["spec"].get("taints") or [] if t["key"] == TAINT_KEY]


def test_max_parallel_holds_on_every_event_while_three_nodes_are_remediated(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, outcomes = cluster
    outcomes.reset_seconds = 1.0
    watcher = Watcher(sim, max_parallel=1)
    try:
        with kit.operator_running(sim):
            runs = {name: len(history(sim, name)) for name in NODE_NAMES}
            put_spec(sim, kit, remediation(maxParallel=1))
            for name in NODE_NAMES:
                set_gpu_health(sim, name, False)
            sim.wait_for(
                lambda: all(
                    len(history(sim, n)) == runs[n] + 1 and state_of(sim, n) == "recovered"
                    for n in NODE_NAMES
                ),
                timeout=150,
                what="a new run of every node recovered",
            )
    finally:
        watcher.stop()
        outcomes.reset_seconds = 0.3
    assert watcher.violations == []
    assert watcher.widest == 1


def test_an_operator_restarted_mid_repair_resumes_and_repeats_no_step(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, outcomes = cluster
    api = sim.api()
    outcomes.reset_seconds = 4.0
    _, since = api.list(JOBS, NAMESPACE)
    before = event_counts(sim, "amd-0")
    watcher = Watcher(sim)
    try:
        with kit.operator_running(sim):
            put_spec(sim, kit, remediation())
            set_gpu_health(sim, "amd-0", False)
            wait_state(sim, ("amd-0",), "repairing")
        with kit.operator_running(sim):  # a new operator: nothing in memory carries over
            wait_state(sim, ("amd-0",), "recovered")
    finally:
        watcher.stop()
        outcomes.reset_seconds = 0.3
    assert jobs_added(sim, since, "gpu-reset") == ["amd-0"]  # one reset Job for the run, ever
    walk = watcher.walks["amd-0"]
    assert walk[-1] == "recovered" and "repairing" in walk and in_order(walk[1:]), walk
    after = event_counts(sim, "amd-0")
    for reason in (
        "RemediationDetected",
        "RemediationStarted",
        "RemediationDraining",
        "RemediationRepairing",
    ):
        assert after[reason] - before.get(reason, 0) == 1, (reason, before, after)


def test_a_failing_reset_playbook_fails_the_node_with_the_task_error_in_an_event(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, outcomes = cluster
    api = sim.api()
    outcomes.failing = {"amd-1"}
    try:
        with kit.operator_running(sim):
            put_spec(sim, kit, remediation(rebootOnResetFailure=False))
            set_gpu_health(sim, "amd-1", False)
            wait_state(sim, ("amd-1",), "failed")
            dc = sim.wait_for_object(
                DEVICECONFIGS,
                "gpus",
                NAMESPACE,
                lambda d: (
                    (d.get("status") or {})
                    .get("remediation", {})
                    .get("nodes", {})
                    .get("amd-1", {})
                    .get("state")
                    == "failed"
                ),
                timeout=30,
            )
    finally:
        outcomes.failing = set()
    messages = [e["message"] for e in node_events(sim, "amd-1") if e["reason"] == "RemediationFailed"]
    assert any(
        "task 'reset the GPUs' failed: amd-smi: GPU 0000:c1:00.0 reset failed: device busy" in m
        for m in messages
    )
    node = api.get(NODES, "amd-1")
    assert node["spec"]["unschedulable"] is True
    assert "device busy" in dc["status"]["remediation"]["nodes"]["amd-1"]["message"]
    set_gpu_health(sim, "amd-1", True)
    with kit.operator_running(sim):
        api.patch(NODES, "amd-1", {"metadata": {"labels": {STATE_LABEL: None}}})
        sim.wait_for(
            lambda: not api.get(NODES, "amd-1")["spec"].get("unschedulable"),
            timeout=30,
            what="amd-1 given back",
        )


def test_a_reset_the_driver_refuses_reboots_the_node_with_the_tools_message_and_it_recovers(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, outcomes = cluster
    api = sim.api()
    outcomes.failing = {"amd-1"}
    outcomes.operands_at_reset = []
    boot_before = api.get(NODES, "amd-1")["status"]["nodeInfo"]["bootID"]
    try:
        with kit.operator_running(sim):
            put_spec(sim, kit, remediation())
            set_gpu_health(sim, "amd-1", False)
            wait_state(sim, ("amd-1",), "recovered", timeout=120)
    finally:
        outcomes.failing = set()
    assert api.get(NODES, "amd-1")["status"]["nodeInfo"]["bootID"] != boot_before
    rebooting = [e["message"] for e in node_events(sim, "amd-1") if e["reason"] == "RemediationRebooting"]
    assert any("amd-smi: GPU 0000:c1:00.0 reset failed: device busy" in m for m in rebooting), rebooting
    assert history(sim, "amd-1")[-1]["steps"] == ["drain", "reset-failed", "reboot", "validate"]
    # The operands were paused and their pods gone before the reset Job ran, and are back now.
    assert outcomes.operands_at_reset == [[]]
    labels = api.get(NODES, "amd-1")["metadata"]["labels"]
    deploy = {k: v for k, v in labels.items() if k.startswith("gpuop.dev/deploy.")}
    assert deploy and set(deploy.values()) == {"true"}, deploy


def test_remediation_and_a_driver_upgrade_never_overlap_on_a_node(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, outcomes = cluster
    api = sim.api()
    driver = {
        "enable": True,
        "version": "6.2",
        "upgradePolicy": {"rebootRequired": False, "maxParallelUpgrades": 3, "maxUnavailableNodes": 3},
    }
    with kit.operator_running(sim):
        put_spec(sim, kit, {**remediation(), "driver": driver})
        sim.wait_for(
            lambda: all(
                api.get(NODES, n)["metadata"]["labels"].get(VERSION_LABEL) == "6.2" for n in NODE_NAMES
            ),
            timeout=90,
            what="driver 6.2 installed",
        )
    outcomes.reset_seconds = 2.0
    watcher = Watcher(sim)
    try:
        with kit.operator_running(sim):
            set_gpu_health(sim, "amd-0", False)
            wait_state(sim, ("amd-0",), "repairing")
            # An upgrade asked for while amd-0 is in remediation, and a fault on amd-1 during it.
            put_spec(sim, kit, {**remediation(), "driver": {**driver, "version": "6.3"}})
            sim.wait_for(
                lambda: api.get(NODES, "amd-1")["metadata"]["labels"].get(UPGRADE_STATE) in IN_FLIGHT_VALUES,
                timeout=60,
                what="amd-1 upgrading",
            )
            set_gpu_health(sim, "amd-1", False)
            sim.wait_for(
                lambda: all(
                    api.get(NODES, n)["metadata"]["labels"].get(UPGRADE_STATE) == "upgrade-done"
                    for n in NODE_NAMES
                ),
                timeout=120,
                what="every node upgrade-done",
            )
            wait_state(sim, ("amd-0", "amd-1"), "recovered", timeout=120)
    finally:
        watcher.stop()
        outcomes.reset_seconds = 0.3
    assert watcher.violations == []
    assert all(api.get(NODES, n)["metadata"]["labels"][VERSION_LABEL] == "6.3" for n in NODE_NAMES)


def test_a_user_repair_playbook_comes_from_the_override_config_map_and_holds_until_it_is_there(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, _ = cluster
    api = sim.api()
    overrides = "playbook-overrides"
    jobs = JobSettings(
        namespace=NAMESPACE, release=kit.release, image=DEFAULT_JOB_IMAGE, overrides_config_map=overrides
    )
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": overrides}, "data": {}}
    api.create(CONFIGMAPS, body, NAMESPACE)
    put_spec(sim, kit, remediation(playbook="site-fix"))  # before the operator: its first pass sees it
    set_gpu_health(sim, "amd-2", False)
    with kit.operator_running(sim, jobs=jobs):
        dc = sim.wait_for_object(
            DEVICECONFIGS,
            "gpus",
            NAMESPACE,
            lambda d: any(
                "spec.remediation.playbook" in c.get("message", "")
                for c in (d.get("status") or {}).get("conditions", [])
            ),
            timeout=30,
        )
        degraded = next(c for c in dc["status"]["conditions"] if c["type"] == "Degraded")
        assert degraded["status"] == "True"
        assert f"ConfigMap {NAMESPACE}/{overrides} has no key site-fix.yml" in degraded["message"]
        assert state_of(sim, "amd-2") != "detected"  # held before any node moved
        runs = len(history(sim, "amd-2"))
        playbook = "- hosts: localhost\n  tasks: []\n"
        api.patch(CONFIGMAPS, overrides, {"data": {"site-fix.yml": playbook}}, NAMESPACE)
        sim.wait_for(
            lambda: len(history(sim, "amd-2")) == runs + 1 and state_of(sim, "amd-2") == "recovered",
            timeout=60,
            what="a new run of amd-2 recovered",
        )
    assert history(sim, "amd-2")[-1]["result"] == "recovered"
    job = api.get(JOBS, "gpuop-reset-amd-2", NAMESPACE)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["playbook", "site-fix"] and "--overrides-dir" in args
    api.delete(CONFIGMAPS, overrides, NAMESPACE)


def test_a_node_that_leaves_the_selector_mid_run_is_given_back(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, outcomes = cluster
    api = sim.api()
    amd = "feature.node.kubernetes.io/pci-1002.present"
    outcomes.failing = {"amd-0"}  # the run ends `failed`: tainted and cordoned for a person
    try:
        with kit.operator_running(sim):
            selector = {"selector": {"matchLabels": {amd: "true"}}}
            put_spec(sim, kit, {**remediation(rebootOnResetFailure=False), **selector})
            set_gpu_health(sim, "amd-0", False)
            wait_state(sim, ("amd-0",), "failed")
            assert api.get(NODES, "amd-0")["spec"]["unschedulable"] is True
            api.patch(NODES, "amd-0", {"metadata": {"labels": {amd: None}}})  # out of the DeviceConfig
            sim.wait_for(
                lambda: (
                    state_of(sim, "amd-0") is None
                    and not api.get(NODES, "amd-0")["spec"].get("unschedulable")
                ),
                timeout=30,
                what="amd-0 given back",
            )
    finally:
        outcomes.failing = set()
        set_gpu_health(sim, "amd-0", True)
        api.patch(NODES, "amd-0", {"metadata": {"labels": {amd: "true"}}})
    node = api.get(NODES, "amd-0")
    assert not [t for t in node["spec"].get("taints") or [] if t["key"] == TAINT_KEY]
    stopped = [e["message"] for e in node_events(sim, "amd-0") if e["reason"] == "RemediationStopped"]
    assert any("the node left the DeviceConfig's selector" in m for m in stopped), stopped


def test_the_node_the_operator_runs_on_is_remediated_without_evicting_the_operator(
    cluster: tuple[SimCluster, Outcomes], kit: Any
) -> None:
    sim, _ = cluster
    api = sim.api()
    api.create(DEPLOYMENTS, kit.operator_deployment("amd-2"), NAMESPACE)
    try:
        sim.wait_for(lambda: len(kit.operator_pods(sim)) == 1, timeout=30, what="the operator's pod")
        before = kit.operator_pods(sim)
        with kit.operator_running(sim):
            put_spec(sim, kit, remediation())
            set_gpu_health(sim, "amd-2", False)
            # Evicted, its replacement could only go back to this cordoned node: the operator of a
            # one-node cluster would be gone until the drain it is waiting for ends (it never does).
            wait_state(sim, ("amd-2",), "recovered", timeout=60)
        assert kit.operator_pods(sim) == before
        steps = history(sim, "amd-2")[-1]["steps"]
        assert steps[0] == "drain" and "reset" in steps
    finally:
        api.delete(DEPLOYMENTS, "gpuop-operator", NAMESPACE)
