"""The driver lifecycle planner (driverflow) against a small model of a cluster, pass by pass.

`World` applies each plan the way the reconciler and the cluster would: node patches, Jobs that run
for a few passes and then succeed (or fail where a test says so), evictions that a PDB may refuse,
reboots that change the bootID. The bounds are checked after every single pass, not at the end.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field

import pytest
from gpuop_common.config.driver import DriverConfig
from gpuop_operator.drain import NodePod, plan_drain
from gpuop_operator.driverdefaults import default_driver_versions
from gpuop_operator.driverflow import (
    ADMIN_CORDON,
    FAILURE,
    PAUSE_VALUE,
    TEST_REQUEST,
    TEST_RESULT,
    VERSION_LABEL,
    DriverPlan,
    FailedRun,
    JobRequest,
    NodeEvent,
    plan_driver,
)
from gpuop_operator.driverjob import JobView
from gpuop_operator.model import AMD_PRESENT, NodeInfo, deploy_label
from gpuop_operator.plan import plan_rollout
from gpuop_operator.upgrade import IN_FLIGHT, STATE_LABEL, UpgradeState, is_unavailable, parse_state

DP = deploy_label("device-plugin")
EXPORTER = deploy_label("metrics-exporter")


def driver(version: str = "6.2", **policy: object) -> DriverConfig:
    return DriverConfig.model_validate({"enable": True, "version": version, "upgradePolicy": policy})


def gpu_node(name: str, **labels: str) -> NodeInfo:
    return NodeInfo(name, {AMD_PRESENT: "true", **labels}, {}, boot_id=f"{name}-boot-0", gpus_allocatable=8)


@dataclass
class World:
    nodes: dict[str, NodeInfo]
    job_passes: int = 2  # passes a Job runs before it finishes
    fail_jobs_on: set[str] = field(default_factory=set)
    pdb_blocks: set[str] = field(default_factory=set)  # pods whose eviction a PDB refuses
    pods: dict[str, list[NodePod]] = field(default_factory=dict)
    jobs: dict[tuple[str, str], JobView] = field(default_factory=dict)
    ages: dict[tuple[str, str], int] = field(default_factory=dict)
    operand_pods: set[tuple[str, str]] = field(default_factory=set)
    failed_runs: dict[str, FailedRun] = field(default_factory=dict)
    now: float = 1_000_000.0
    events: list[tuple[str, str, str]] = field(default_factory=list)
    created: list[tuple[str, str]] = field(default_factory=list)
    reboots: int = 0
    validation_recipe: str | None = None
    failing_validation: set[str] = field(default_factory=set)
    answered: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    allocatable_expected: bool = True  # a device plugin advertises the GPUs
    advertises: bool = True  # False: its GPUs never reach allocatable (nothing registers them)
    uninstall: bool = False  # the driver is to come off (enable false / deletion, policy Uninstall)

    def step(self, config: DriverConfig, seconds: float = 10.0) -> DriverPlan:
        self.now += seconds
        self._advance_jobs()
        plan = plan_driver(
            config,
            list(self.nodes.values()),
            dict(self.jobs),
            node_pods=self.pods,
            operand_pods=frozenset(self.operand_pods),
            failed_runs=self.failed_runs,
            now=self.now,
            job_deadline_s=600,
            validation_recipe=self.validation_recipe,
            validation_timeout_s=300,
            allocatable_expected=self.allocatable_expected,
            uninstall=self.uninstall,
        )
        for patch in [*plan.patches, *plan.start_patches]:
            node = self.nodes[patch.node]
            labels = {**node.labels, **patch.labels}
            annotations = {**node.annotations, **patch.annotations}
            unschedulable = node.unschedulable if patch.unschedulable is None else patch.unschedulable
            self.nodes[patch.node] = dataclasses.replace(
                node,
                labels={k: v for k, v in labels.items() if v is not None},
                annotations={k: v for k, v in annotations.items() if v is not None},
                unschedulable=unschedulable,
            )
        for job in plan.delete_jobs:
            self.jobs.pop((job.node, job.operation), None)
        for node, operation, _vendor, version in plan.create_jobs:
            name = f"{operation}-{node}-{len(self.created)}"
            self.created.append((node, operation))
            self.jobs[(node, operation)] = JobView(name, f"uid-{name}", node, operation, version, "running")
            self.ages[(node, operation)] = 0
        for pod in plan.evict + plan.delete_pods:
            if pod.name not in self.pdb_blocks:
                self.pods[self._node_of(pod)].remove(pod)
        # Paused operands' pods go away; resumed ones come back.
        for name, node in self.nodes.items():
            for label, value in node.labels.items():
                service = label.removeprefix("gpuop.dev/deploy.")
                if value == PAUSE_VALUE:
                    self.operand_pods.discard((name, service))
                elif value == "true" and label.startswith("gpuop.dev/deploy."):
                    self.operand_pods.add((name, service))
        # The kubelet: a stopped device plugin's devices leave allocatable at once; its pod back,
        # they return (the re-registration, one pass later for the planner).
        for name, node in self.nodes.items():
            if node.labels.get(DP) == PAUSE_VALUE and node.gpus_allocatable:
                self.nodes[name] = dataclasses.replace(node, gpus_allocatable=0)
            elif (
                self.advertises and (name, "device-plugin") in self.operand_pods and not node.gpus_allocatable
            ):
                self.nodes[name] = dataclasses.replace(node, gpus_allocatable=8)
        self.events += [(e.node, e.reason, e.message) for e in plan.events]
        self.finished += [node for node, _ in plan.finished]
        self.durations += [seconds for _, seconds in plan.finished]
        self._answer_test_requests()
        return plan

    def _answer_test_requests(self) -> None:
        """The nodes' test runners: answer a request and clear it (docs/test-runner.md)."""
        for name, node in self.nodes.items():
            request = node.annotations.get(TEST_REQUEST)
            if not request or (name, "test-runner") not in self.operand_pods:
                continue
            recipe, _, request_id = request.partition(":")
            result = "Failed" if name in self.failing_validation else "Passed"
            answer = json.dumps(
                {"requestId": request_id, "recipe": recipe, "result": result, "reason": "gpu 0: ECC"}
            )
            annotations = {k: v for k, v in node.annotations.items() if k != TEST_REQUEST}
            self.nodes[name] = dataclasses.replace(node, annotations={**annotations, TEST_RESULT: answer})
            self.answered.append(name)

    def _node_of(self, pod: NodePod) -> str:
        return next(node for node, pods in self.pods.items() if pod in pods)

    def _advance_jobs(self) -> None:
        for key, job in list(self.jobs.items()):
            if job.phase != "running":
                continue
            self.ages[key] += 1
            if self.ages[key] < self.job_passes:
                continue
            node, operation = key
            if operation == "node-reboot":
                self.nodes[node] = dataclasses.replace(
                    self.nodes[node], boot_id=f"{node}-boot-{self.reboots + 1}"
                )
                self.reboots += 1
                self.jobs[key] = dataclasses.replace(
                    job, phase="failed", reason="PodFailed"
                )  # died with the host
            elif node in self.fail_jobs_on:
                self.jobs[key] = dataclasses.replace(job, phase="failed", reason="BackoffLimitExceeded")
                self.failed_runs[job.uid] = FailedRun(
                    "task 'Build amdgpu-dkms': dkms build failed",
                    (("Build amdgpu-dkms", "make: *** Error 2"),),
                )
            else:
                self.jobs[key] = dataclasses.replace(job, phase="succeeded")

    def states(self) -> dict[str, str | None]:
        return {name: node.labels.get(STATE_LABEL) for name, node in self.nodes.items()}


def test_a_fresh_node_gets_one_install_job_then_the_version_label_and_an_event() -> None:
    world = World({"n0": gpu_node("n0")})
    first = world.step(driver())
    assert [j[:3] for j in first.create_jobs] == [("n0", "driver-install", "amd")]
    assert first.states["n0"].state == "installing"
    assert world.step(driver()).create_jobs == []  # the Job exists: never a second one
    for _ in range(3):
        world.step(driver())
    assert world.nodes["n0"].labels[VERSION_LABEL] == "6.2"
    assert STATE_LABEL not in world.nodes["n0"].labels
    assert ("n0", "DriverInstalled") in {(n, r) for n, r, _ in world.events}
    assert world.created == [("n0", "driver-install")]


def test_operands_wait_for_the_driver_stage() -> None:
    spec_nodes = [gpu_node("n0"), gpu_node("n1", **{VERSION_LABEL: "6.2"})]
    from gpuop_common.config import DeviceConfigSpec

    spec = DeviceConfigSpec.model_validate({"driver": {"enable": True, "version": "6.2"}})
    plan = plan_rollout("ns/dc", spec, spec_nodes, [], driver_ready={"n1"})
    by_node = {p.node: p for p in plan.nodes}
    assert by_node["n0"].stage == "driver-installing"
    assert by_node["n0"].patch is not None and DP not in by_node["n0"].patch.labels
    assert by_node["n1"].patch is not None and by_node["n1"].patch.labels[DP] == "true"
    assert "gpuop.dev/deploy.driver" not in by_node["n1"].patch.labels  # no DaemonSet for the driver


def test_a_failing_dkms_build_fails_the_node_with_the_task_in_events() -> None:
    world = World({"n0": gpu_node("n0")}, fail_jobs_on={"n0"})
    for _ in range(4):
        world.step(driver())
    node = world.nodes["n0"]
    assert node.labels[STATE_LABEL] == UpgradeState.FAILED.value
    assert "dkms build failed" in node.annotations[FAILURE]
    task_events = [m for n, r, m in world.events if r == "DriverInstallFailed" and "Build amdgpu-dkms" in m]
    assert task_events and "Error 2" in task_events[0]
    count = len(world.events)
    for _ in range(3):
        world.step(driver())
    assert len(world.events) == count  # reported once, not on every pass
    assert world.created == [("n0", "driver-install")]  # and not retried by itself


def installed_cluster(count: int, version: str = "6.1", **extra: str) -> dict[str, NodeInfo]:
    return {
        f"n{i:02d}": gpu_node(f"n{i:02d}", **{VERSION_LABEL: version, DP: "true", EXPORTER: "true"}, **extra)
        for i in range(count)
    }


def check_bounds(world: World, max_parallel: int, max_unavailable: int) -> int:
    """Asserts both bounds now; returns the nodes in flight."""
    states = [parse_state(s) for s in world.states().values()]
    in_flight = sum(1 for s in states if s in IN_FLIGHT)
    assert in_flight <= max_parallel, world.states()
    from gpuop_operator.upgrade import NodeView

    views = [
        NodeView(n.name, parse_state(n.labels.get(STATE_LABEL)), n.ready, n.unschedulable)
        for n in world.nodes.values()
    ]
    assert sum(1 for v in views if is_unavailable(v)) <= max_unavailable, world.states()
    return in_flight


def test_fifty_nodes_upgrade_within_both_bounds_at_every_pass_and_one_failure_stays_failed() -> None:
    world = World(installed_cluster(50), fail_jobs_on={"n17"})
    config = driver("6.2", maxParallelUpgrades=5, maxUnavailableNodes="20%", rebootRequired=True)
    limit = math.ceil(0.2 * 50)
    widest = 0
    for _ in range(400):
        world.step(config)
        widest = max(widest, check_bounds(world, 5, limit))
        if all(s in (UpgradeState.DONE.value, UpgradeState.FAILED.value) for s in world.states().values()):
            break
    states = world.states()
    assert states["n17"] == UpgradeState.FAILED.value
    assert sum(1 for s in states.values() if s == UpgradeState.DONE.value) == 49
    done = [n for n in world.nodes.values() if n.labels.get(STATE_LABEL) == UpgradeState.DONE.value]
    assert all(n.labels[VERSION_LABEL] == "6.2" and not n.unschedulable for n in done)
    assert all(n.labels[DP] == "true" and n.labels[EXPORTER] == "true" for n in done)  # operands resumed
    assert world.reboots == 49
    assert world.nodes["n17"].unschedulable  # a failed node stays cordoned for a person to look at
    assert widest == 5  # the parallel bound was reached, not just respected
    assert sorted(world.finished) == sorted(n.name for n in done)  # each walk's duration reported once
    assert all(seconds > 0 for seconds in world.durations)


def test_the_unavailable_budget_counts_nodes_cordoned_by_someone_else() -> None:
    nodes = installed_cluster(10)
    nodes["n09"] = dataclasses.replace(nodes["n09"], unschedulable=True)  # an admin's, not ours
    world = World(nodes)
    config = driver("6.2", maxParallelUpgrades=10, maxUnavailableNodes=3, rebootRequired=False)
    widest = 0
    for _ in range(200):
        world.step(config)
        widest = max(widest, check_bounds(world, 10, 3))
    assert all(s == UpgradeState.DONE.value for s in world.states().values())
    # n09 is down anyway and may go along; other nodes only fill what the budget leaves.
    assert widest == 3


def test_a_failed_node_is_retried_only_when_a_person_sets_it_back() -> None:
    world = World(installed_cluster(1), fail_jobs_on={"n00"})
    config = driver("6.2", rebootRequired=False)
    for _ in range(20):
        world.step(config)
    assert world.states()["n00"] == UpgradeState.FAILED.value
    world.fail_jobs_on.clear()
    node = world.nodes["n00"]
    world.nodes["n00"] = dataclasses.replace(
        node, labels={**node.labels, STATE_LABEL: UpgradeState.REQUIRED.value}
    )
    for _ in range(20):
        world.step(config)
    assert world.states()["n00"] == UpgradeState.DONE.value
    assert world.nodes["n00"].labels[VERSION_LABEL] == "6.2"


def test_an_admin_cordoned_node_stays_cordoned_after_its_upgrade() -> None:
    nodes = installed_cluster(2)
    nodes["n00"] = dataclasses.replace(nodes["n00"], unschedulable=True)
    world = World(nodes)
    config = driver("6.2", maxParallelUpgrades=2, maxUnavailableNodes=2, rebootRequired=False)
    for _ in range(30):
        world.step(config)
    assert world.states() == {"n00": "upgrade-done", "n01": "upgrade-done"}
    assert world.nodes["n00"].unschedulable and not world.nodes["n01"].unschedulable
    assert ADMIN_CORDON not in world.nodes["n00"].annotations  # step marks are cleaned up


def test_a_pdb_that_blocks_eviction_fails_the_drain_at_its_timeout() -> None:
    world = World(installed_cluster(1))
    world.pods["n00"] = [
        NodePod("apps", "db-0", "u1", "StatefulSet"),
        NodePod("apps", "web-1", "u2", "ReplicaSet"),
        NodePod("gpu-operator", "dp-x", "u3", "DaemonSet"),
    ]
    world.pdb_blocks = {"db-0"}
    config = driver("6.2", nodeDrainPolicy={"timeoutSeconds": 60}, rebootRequired=False)
    evicted: list[str] = []
    for _ in range(15):
        plan = world.step(config)
        evicted += [p.name for p in plan.evict]
    assert "web-1" in evicted and "db-0" in evicted and "dp-x" not in evicted
    assert evicted.count("db-0") > 1  # refused, then tried again
    assert world.states()["n00"] == UpgradeState.FAILED.value
    assert "drain timed out after 60s" in world.nodes["n00"].annotations[FAILURE]
    assert "apps/db-0" in world.nodes["n00"].annotations[FAILURE]


def test_gpu_pod_deletion_policy_deletes_only_pods_using_gpus() -> None:
    pods = [
        NodePod("ml", "train-0", "u1", "Job", uses_gpu=True),
        NodePod("web", "nginx", "u2", "ReplicaSet"),
        NodePod("ml", "daemon", "u3", "DaemonSet", uses_gpu=True),
    ]
    step = plan_drain(pods, gpu_pods_only=True, force=False)
    assert [p.name for p in step.remove] == ["train-0"]


@pytest.mark.parametrize(
    ("case", "pod", "outcome"),
    [
        ("bare pod without force", NodePod("a", "bare", "u", ""), "refused"),
        ("mirror pod", NodePod("kube-system", "etcd", "u", "Node", mirror=True), "kept"),
        ("finished pod", NodePod("a", "done", "u", "Job", finished=True), "kept"),
        ("terminating pod", NodePod("a", "going", "u", "ReplicaSet", deleting=True), "waiting"),
        ("our own driver Job pod", NodePod("gpu-operator", "job", "u", "Job", ours=True), "kept"),
    ],
)
def test_drain_treats_each_kind_of_pod_like_kubectl_drain(case: str, pod: NodePod, outcome: str) -> None:
    step = plan_drain([pod], gpu_pods_only=False, force=False)
    got = "refused" if step.refused else "waiting" if step.waiting else "removed" if step.remove else "kept"
    assert got == outcome, case


def test_an_unmanaged_pod_fails_the_drain_naming_it_unless_forced() -> None:
    world = World(installed_cluster(1))
    world.pods["n00"] = [NodePod("default", "hand-made", "u1", "")]
    for _ in range(5):
        world.step(driver("6.2", rebootRequired=False))
    assert world.states()["n00"] == UpgradeState.FAILED.value
    assert "default/hand-made not managed by a controller" in world.nodes["n00"].annotations[FAILURE]


def test_operands_are_paused_before_the_job_and_resumed_after_the_reboot() -> None:
    world = World(installed_cluster(1))
    config = driver("6.2", rebootRequired=True)
    seen: list[tuple[str | None, str | None, bool]] = []
    for _ in range(30):
        world.step(config)
        node = world.nodes["n00"]
        running_job = any(
            j.phase == "running" and j.operation == "driver-install" for j in world.jobs.values()
        )
        seen.append((node.labels.get(STATE_LABEL), node.labels.get(DP), running_job))
    assert all(dp == PAUSE_VALUE for state, dp, job in seen if job)  # never a plugin during the build
    assert world.states()["n00"] == UpgradeState.DONE.value
    assert world.nodes["n00"].labels[DP] == "true"
    states = [s for s, _, _ in seen]
    order = [s.value for s in UpgradeState if s.value in states]
    # As each pass leaves the node: upgrade-required and cordoned are passed through in the pass
    # that starts it (test_a_start_cordons_and_drains_in_one_patch...).
    assert order == [
        "draining",
        "pod-restart",
        "upgrading",
        "rebooting",
        "validating",
        "upgrade-done",
    ]


def test_a_start_cordons_and_drains_in_one_patch_and_a_drained_node_pauses_its_operands_at_once() -> None:
    """Steps that wait on nothing outside the pass are taken in it, in one patch per node: a
    version change starts a free node (required -> cordoned -> draining); the next pass, with its
    pods listed and none to evict, goes on to pod-restart and pauses the operands."""
    world = World(installed_cluster(1))  # device plugin and exporter running
    world.operand_pods |= {("n00", "device-plugin"), ("n00", "metrics-exporter")}
    plan = world.step(driver("6.2", rebootRequired=False))
    assert plan.patches == [] and len(plan.start_patches) == 1
    start = plan.start_patches[0]
    assert start.labels[STATE_LABEL] == UpgradeState.DRAINING.value and start.unschedulable is True
    assert [e.reason for e in plan.events] == ["DriverUpgradeStarted"]
    world.pods["n00"] = []  # the reconciler lists a draining node's pods: nothing to evict
    plan = world.step(driver("6.2", rebootRequired=False))
    assert len(plan.patches) == 1 and plan.start_patches == []
    patch = plan.patches[0]
    paused = {DP: PAUSE_VALUE, EXPORTER: PAUSE_VALUE}
    assert patch.labels == {STATE_LABEL: UpgradeState.POD_RESTART.value, **paused}
    assert plan.create_jobs == []  # the operands' pods must go before the build starts
    plan = world.step(driver("6.2", rebootRequired=False))
    assert [j[:2] for j in plan.create_jobs] == [("n00", "driver-install")]
    assert world.nodes["n00"].labels[STATE_LABEL] == UpgradeState.UPGRADING.value


def test_a_node_that_finishes_hands_its_slot_on_in_the_same_pass() -> None:
    world = World(installed_cluster(2))
    config = driver("6.2", maxParallelUpgrades=1, rebootRequired=False)
    for _ in range(30):
        plan = world.step(config)
        if plan.finished:
            break
    assert [name for name, _ in plan.finished] == ["n00"]
    assert [p.node for p in plan.start_patches] == ["n01"]  # sent only after n00's patch applied
    assert [p.node for p in plan.patches] == ["n00"]


def test_writes_of_a_node_whose_patch_failed_are_held_back() -> None:
    """The reconciler drops a node's Jobs, evictions and Events when its patch did not apply: the
    step runs again next pass, and its writes would otherwise come before the node records it."""
    job = JobView("j", "u", "n00", "driver-install", "6.1", "succeeded")
    pod = NodePod("default", "p", "u2", "ReplicaSet", node="n01")
    plan = DriverPlan(
        create_jobs=[
            JobRequest("n00", "driver-install", "amd", "6.1"),
            JobRequest("n01", "driver-install", "amd", "6.1"),
        ],
        delete_jobs=[job],
        evict=[pod],
        events=[NodeEvent("n00", "DriverUpgradeStarted", "m"), NodeEvent("n01", "DriverUpgraded", "m")],
    )
    kept = plan.without({"n00"})
    assert [j.node for j in kept.create_jobs] == ["n01"] and kept.delete_jobs == []
    assert kept.evict == [pod] and [e.node for e in kept.events] == ["n01"]
    assert plan.without({"n01"}).evict == [] and plan.without(set()) is plan


def test_a_restarted_operator_resumes_from_the_labels_and_repeats_no_finished_node() -> None:
    world = World(installed_cluster(6))
    config = driver("6.2", maxParallelUpgrades=2, maxUnavailableNodes=2, rebootRequired=False)
    for _ in range(12):
        world.step(config)
    done_before = {n for n, s in world.states().items() if s == UpgradeState.DONE.value}
    assert done_before  # some finished before the "restart"
    # A new operator knows only the cluster: the nodes and the Jobs; nothing in memory carries over.
    world.failed_runs = {}
    jobs_before = list(world.created)
    for _ in range(40):
        world.step(config)
    assert all(s == UpgradeState.DONE.value for s in world.states().values())
    repeated = [c for c in world.created[len(jobs_before) :] if c[0] in done_before]
    assert repeated == []


def test_an_invalid_state_label_is_reported_and_the_node_left_alone() -> None:
    world = World(installed_cluster(1, **{STATE_LABEL: "half-way"}))
    plan = world.step(driver("6.2"))
    assert plan.states["n00"].state == "invalid-state"
    assert "half-way" in plan.states["n00"].message
    assert plan.patches == [] and plan.create_jobs == []


def test_a_node_without_a_single_vendor_label_is_reported() -> None:
    node = NodeInfo("cpu-0", {}, {})
    plan = plan_driver(driver(), [node], {}, now=0)
    assert plan.states["cpu-0"].state == "unknown-vendor" and plan.create_jobs == []


def test_upgrades_disabled_leaves_version_drift_visible() -> None:
    world = World(installed_cluster(1))
    plan = world.step(
        DriverConfig.model_validate({"enable": True, "version": "6.2", "upgradePolicy": {"enable": False}})
    )
    assert plan.states["n00"].state == "version-drift" and plan.patches == []


def test_with_a_validation_recipe_the_test_runner_must_pass_the_node_first() -> None:
    runner = deploy_label("test-runner")
    nodes = installed_cluster(2, **{runner: "true"})
    world = World(nodes, validation_recipe="gst_single", failing_validation={"n01"})
    world.nodes["n01"] = dataclasses.replace(
        world.nodes["n01"], annotations={TEST_RESULT: json.dumps({"requestId": "old", "result": "Passed"})}
    )
    config = driver("6.2", maxParallelUpgrades=2, maxUnavailableNodes=2, rebootRequired=False)
    for _ in range(30):
        world.step(config)
    assert world.states() == {"n00": "upgrade-done", "n01": "upgrade-failed"}
    assert sorted(world.answered) == ["n00", "n01"]  # an older answer never counted
    assert "validation recipe gst_single Failed: gpu 0: ECC" in world.nodes["n01"].annotations[FAILURE]
    assert world.nodes["n01"].unschedulable and not world.nodes["n00"].unschedulable


def test_a_validation_nobody_answers_times_out() -> None:
    world = World(installed_cluster(1), validation_recipe="gst_single")  # no test runner pod on the node
    config = driver("6.2", rebootRequired=False)
    for _ in range(120):
        world.step(config)
    assert world.states()["n00"] == "upgrade-failed"
    assert (
        "validation timed out after 900s waiting for an answer to recipe gst_single"
        in world.nodes["n00"].annotations[FAILURE]
    )


def test_without_a_device_plugin_validation_needs_no_gpus_in_allocatable() -> None:
    """With the device plugin off (DRA driver, or nothing advertising GPUs) allocatable never
    fills: a Ready node finishes; with it on, the same node waits and says for what."""
    nodes = {
        name: dataclasses.replace(node, gpus_allocatable=0) for name, node in installed_cluster(1).items()
    }
    waiting = World(dict(nodes), advertises=False)
    for _ in range(12):
        plan = waiting.step(driver("6.2"))
    assert parse_state(waiting.nodes["n00"].labels[STATE_LABEL]) is UpgradeState.VALIDATING
    assert plan.states["n00"].message == "waiting for the GPUs in allocatable"
    without_plugin = World(dict(nodes), allocatable_expected=False, advertises=False)
    for _ in range(12):
        without_plugin.step(driver("6.2"))
    assert without_plugin.nodes["n00"].labels[STATE_LABEL] == UpgradeState.DONE.value
    assert without_plugin.finished == ["n00"]


def test_an_empty_version_is_the_vendors_default_and_writing_it_out_later_changes_nothing() -> None:
    """The playbook installs `default_driver_versions` for an empty version: the node is labelled
    with that concrete version, so setting it explicitly later is no upgrade and no Job."""
    default = default_driver_versions()["amd"]
    world = World({"n0": gpu_node("n0")})
    first = world.step(driver(""))
    assert [tuple(j) for j in first.create_jobs] == [("n0", "driver-install", "amd", default)]
    for _ in range(3):
        world.step(driver(""))
    assert world.nodes["n0"].labels[VERSION_LABEL] == default
    created = len(world.created)
    explicit = world.step(driver(default))
    assert explicit.patches == [] and explicit.start_patches == [] and explicit.create_jobs == []
    assert explicit.states["n0"].state == "installed" and world.states()["n0"] is None
    assert len(world.created) == created


def installed_world(n: int = 3, **kwargs: object) -> World:
    """`n` nodes with the driver installed by gpuop, operands running, plus one with a pre-installed
    driver (no version label of ours)."""
    nodes = {f"n{i}": gpu_node(f"n{i}", **{VERSION_LABEL: "6.2", DP: "true"}) for i in range(n)}
    # A state label of an old walk but no version label of ours: still not ours to touch.
    nodes["own-driver"] = gpu_node("own-driver", **{DP: "true", STATE_LABEL: "upgrade-done"})
    world = World(nodes, **kwargs)  # type: ignore[arg-type]
    world.operand_pods = {(name, "device-plugin") for name in nodes}
    return world


def test_uninstall_walks_each_gpuop_node_within_the_bounds_and_leaves_a_preinstalled_driver() -> None:
    world = installed_world(uninstall=True)
    world.nodes["n1"] = dataclasses.replace(world.nodes["n1"], unschedulable=True)  # an admin's cordon
    seen_in_flight = 0
    for _ in range(40):
        plan = world.step(driver(maxParallelUpgrades=1, maxUnavailableNodes=2))
        in_flight = [n for n, s in world.states().items() if parse_state(s) in IN_FLIGHT]
        seen_in_flight = max(seen_in_flight, len(in_flight))
        if all(
            VERSION_LABEL not in world.nodes[n].labels and world.states()[n] is None
            for n in ("n0", "n1", "n2")
        ):
            break
    assert seen_in_flight == 1
    assert sorted(n for n, op in world.created) == ["n0", "n1", "n2"]
    assert {op for _, op in world.created} == {"driver-uninstall"}
    for name in ("n0", "n1", "n2"):
        node = world.nodes[name]
        assert VERSION_LABEL not in node.labels and STATE_LABEL not in node.labels
        assert node.labels[DP] == "true"  # the paused operand is back
        assert not any(k.startswith("gpuop.dev/driver-upgrade.") for k in node.annotations)
    assert not world.nodes["n0"].unschedulable and world.nodes["n1"].unschedulable  # admin's kept
    assert world.nodes["own-driver"] == installed_world().nodes["own-driver"]  # never touched
    assert plan.states["own-driver"].state == "not-installed"
    assert [r for _, r, _ in world.events if r == "DriverUninstalled"] == ["DriverUninstalled"] * 3
    assert not world.jobs  # the finished uninstall Jobs are deleted: a later install starts fresh


def test_a_failed_uninstall_stops_the_node_cordoned_with_the_reason() -> None:
    world = installed_world(1, uninstall=True, fail_jobs_on={"n0"})
    for _ in range(10):
        world.step(driver())
    node = world.nodes["n0"]
    assert node.labels[STATE_LABEL] == "uninstall-failed" and node.unschedulable
    assert node.labels[VERSION_LABEL] == "6.2"  # still there: the driver may be half gone
    assert "dkms build failed" in node.annotations[FAILURE]
    assert any(r == "DriverUninstallFailed" for _, r, _ in world.events)


def test_enabled_again_mid_uninstall_lets_the_job_finish_then_reinstalls() -> None:
    world = installed_world(1, uninstall=True, job_passes=3)
    while world.states()["n0"] != "uninstalling":
        world.step(driver())
    world.uninstall = False
    plan = world.step(driver())
    assert [j for j in plan.create_jobs if j.node == "n0"] == []  # the uninstall is not cut short
    assert world.states()["n0"] == "uninstalling"
    for _ in range(20):
        world.step(driver())
        if world.states()["n0"] == "upgrade-done":
            break
    assert [op for n, op in world.created if n == "n0"][:2] == ["driver-uninstall", "driver-install"]
    assert world.nodes["n0"].labels[VERSION_LABEL] == "6.2" and world.nodes["n0"].labels[DP] == "true"
