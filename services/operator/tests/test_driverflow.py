"""The driver lifecycle planner (driverflow) against a small model of a cluster, pass by pass.

`pk.world` (conftest's `DriverWorld`) applies each plan the way the reconciler and the cluster
would. The bounds are checked after every single pass, not at the end.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from gpuop_common.config.driver import DriverConfig
from gpuop_operator.drain import ControlPods, NodePod, node_pod, plan_drain
from gpuop_operator.driverdefaults import default_driver_versions
from gpuop_operator.driverflow import (
    ADMIN_CORDON,
    FAILURE,
    PAUSE_VALUE,
    PULL_EVENT,
    PULL_REPORTED,
    TEST_RESULT,
    VERSION_LABEL,
    DriverPlan,
    JobRequest,
    NodeEvent,
    plan_driver,
)
from gpuop_operator.driverjob import JobView
from gpuop_operator.model import NodeInfo, deploy_label
from gpuop_operator.plan import plan_rollout
from gpuop_operator.upgrade import IN_FLIGHT, STATE_LABEL, UpgradeState, is_unavailable, parse_state

DP = deploy_label("device-plugin")
EXPORTER = deploy_label("metrics-exporter")


def test_a_fresh_node_gets_one_install_job_then_the_version_label_and_an_event(pk: Any) -> None:
    world = pk.world({"n0": pk.gpu_node("n0")})
    first = world.step(pk.driver())
    assert [j[:3] for j in first.create_jobs] == [("n0", "driver-install", "amd")]
    assert first.states["n0"].state == "installing"
    assert world.step(pk.driver()).create_jobs == []  # the Job exists: never a second one
    for _ in range(3):
        world.step(pk.driver())
    assert world.nodes["n0"].labels[VERSION_LABEL] == "6.2"
    assert STATE_LABEL not in world.nodes["n0"].labels
    assert ("n0", "DriverInstalled") in {(n, r) for n, r, _ in world.events}
    assert world.created == [("n0", "driver-install")]


def test_operands_wait_for_the_driver_stage(pk: Any) -> None:
    spec_nodes = [pk.gpu_node("n0"), pk.gpu_node("n1", **{VERSION_LABEL: "6.2"})]
    from gpuop_common.config import DeviceConfigSpec

    spec = DeviceConfigSpec.model_validate({"driver": {"enable": True, "version": "6.2"}})
    plan = plan_rollout("ns/dc", spec, spec_nodes, [], driver_ready={"n1"})
    by_node = {p.node: p for p in plan.nodes}
    assert by_node["n0"].stage == "driver-installing"
    assert by_node["n0"].patch is not None and DP not in by_node["n0"].patch.labels
    assert by_node["n1"].patch is not None and by_node["n1"].patch.labels[DP] == "true"
    assert "gpuop.dev/deploy.driver" not in by_node["n1"].patch.labels  # no DaemonSet for the driver


def test_a_failing_dkms_build_fails_the_node_with_the_task_in_events(pk: Any) -> None:
    world = pk.world({"n0": pk.gpu_node("n0")}, fail_jobs_on={"n0"})
    for _ in range(4):
        world.step(pk.driver())
    node = world.nodes["n0"]
    assert node.labels[STATE_LABEL] == UpgradeState.FAILED.value
    assert "dkms build failed" in node.annotations[FAILURE]
    task_events = [m for n, r, m in world.events if r == "DriverInstallFailed" and "Build amdgpu-dkms" in m]
    assert task_events and "Error 2" in task_events[0]
    count = len(world.events)
    for _ in range(3):
        world.step(pk.driver())
    assert len(world.events) == count  # reported once, not on every pass
    assert world.created == [("n0", "driver-install")]  # and not retried by itself


def installed_cluster(pk: Any, count: int, version: str = "6.1", **extra: str) -> dict[str, NodeInfo]:
    return {
        f"n{i:02d}": pk.gpu_node(
            f"n{i:02d}", **{VERSION_LABEL: version, DP: "true", EXPORTER: "true"}, **extra
        )
        for i in range(count)
    }


def check_bounds(world: Any, max_parallel: int, max_unavailable: int) -> int:
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


def test_fifty_nodes_upgrade_within_both_bounds_at_every_pass_and_one_failure_stays_failed(pk: Any) -> None:
    world = pk.world(installed_cluster(pk, 50), fail_jobs_on={"n17"})
    config = pk.driver("6.2", maxParallelUpgrades=5, maxUnavailableNodes="20%", rebootRequired=True)
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


def test_the_unavailable_budget_counts_nodes_cordoned_by_someone_else(pk: Any) -> None:
    nodes = installed_cluster(pk, 10)
    nodes["n09"] = dataclasses.replace(nodes["n09"], unschedulable=True)  # an admin's, not ours
    world = pk.world(nodes)
    config = pk.driver("6.2", maxParallelUpgrades=10, maxUnavailableNodes=3, rebootRequired=False)
    widest = 0
    for _ in range(200):
        world.step(config)
        widest = max(widest, check_bounds(world, 10, 3))
    assert all(s == UpgradeState.DONE.value for s in world.states().values())
    # n09 is down anyway and may go along; other nodes only fill what the budget leaves.
    assert widest == 3


def test_a_failed_node_is_retried_only_when_a_person_sets_it_back(pk: Any) -> None:
    world = pk.world(installed_cluster(pk, 1), fail_jobs_on={"n00"})
    config = pk.driver("6.2", rebootRequired=False)
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


def test_an_admin_cordoned_node_stays_cordoned_after_its_upgrade(pk: Any) -> None:
    nodes = installed_cluster(pk, 2)
    nodes["n00"] = dataclasses.replace(nodes["n00"], unschedulable=True)
    world = pk.world(nodes)
    config = pk.driver("6.2", maxParallelUpgrades=2, maxUnavailableNodes=2, rebootRequired=False)
    for _ in range(30):
        world.step(config)
    assert world.states() == {"n00": "upgrade-done", "n01": "upgrade-done"}
    assert world.nodes["n00"].unschedulable and not world.nodes["n01"].unschedulable
    assert ADMIN_CORDON not in world.nodes["n00"].annotations  # step marks are cleaned up


def test_a_pdb_that_blocks_eviction_fails_the_drain_at_its_timeout(pk: Any) -> None:
    world = pk.world(installed_cluster(pk, 1))
    world.pods["n00"] = [
        NodePod("apps", "db-0", "u1", "StatefulSet"),
        NodePod("apps", "web-1", "u2", "ReplicaSet"),
        NodePod("gpu-operator", "dp-x", "u3", "DaemonSet"),
    ]
    world.pdb_blocks = {"db-0"}
    config = pk.driver("6.2", nodeDrainPolicy={"timeoutSeconds": 60}, rebootRequired=False)
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


def test_drain_keeps_the_operators_own_release_pods_and_its_own_pod() -> None:
    control = ControlPods("gpu-operator", "gpuop", own_pod="ops-7d9-x")

    def pod(namespace: str, name: str, instance: str, owner: str = "ReplicaSet") -> dict[str, Any]:
        ref = {"kind": owner, "name": "o", "uid": "u", "controller": True}
        labels = {"app.kubernetes.io/instance": instance}
        meta = {"namespace": namespace, "name": name, "uid": name, "labels": labels, "ownerReferences": [ref]}
        return {"metadata": meta, "spec": {"nodeName": "n00"}, "status": {"phase": "Running"}}

    pods = [
        node_pod(pod("gpu-operator", "gpuop-operator-5f-abc", "gpuop"), control),  # the operator
        node_pod(pod("gpu-operator", "gpuop-crds-upgrade-xyz", "gpuop", "Job"), control),  # a hook Job
        node_pod(pod("gpu-operator", "ops-7d9-x", "ops"), control),  # itself, under another release
        node_pod(pod("apps", "web-1", "gpuop"), control),  # a user's pod with the same release name
        node_pod(pod("gpu-operator", "other-operator-1", "other"), control),  # another release
    ]
    step = plan_drain(pods, gpu_pods_only=False, force=False)
    assert sorted(p.key for p in step.remove) == ["apps/web-1", "gpu-operator/other-operator-1"]


def test_an_unmanaged_pod_fails_the_drain_naming_it_unless_forced(pk: Any) -> None:
    world = pk.world(installed_cluster(pk, 1))
    world.pods["n00"] = [NodePod("default", "hand-made", "u1", "")]
    for _ in range(5):
        world.step(pk.driver("6.2", rebootRequired=False))
    assert world.states()["n00"] == UpgradeState.FAILED.value
    assert "default/hand-made not managed by a controller" in world.nodes["n00"].annotations[FAILURE]


def test_operands_are_paused_before_the_job_and_resumed_after_the_reboot(pk: Any) -> None:
    world = pk.world(installed_cluster(pk, 1))
    config = pk.driver("6.2", rebootRequired=True)
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


def test_a_start_cordons_and_drains_in_one_patch_and_a_drained_node_pauses_its_operands_at_once(
    pk: Any,
) -> None:
    """Steps that wait on nothing outside the pass are taken in it, in one patch per node: a
    version change starts a free node (required -> cordoned -> draining); the next pass, with its
    pods listed and none to evict, goes on to pod-restart and pauses the operands."""
    world = pk.world(installed_cluster(pk, 1))  # device plugin and exporter running
    world.operand_pods |= {("n00", "device-plugin"), ("n00", "metrics-exporter")}
    plan = world.step(pk.driver("6.2", rebootRequired=False))
    assert plan.patches == [] and len(plan.start_patches) == 1
    start = plan.start_patches[0]
    assert start.labels[STATE_LABEL] == UpgradeState.DRAINING.value and start.unschedulable is True
    assert [e.reason for e in plan.events] == ["DriverUpgradeStarted"]
    world.pods["n00"] = []  # the reconciler lists a draining node's pods: nothing to evict
    plan = world.step(pk.driver("6.2", rebootRequired=False))
    assert len(plan.patches) == 1 and plan.start_patches == []
    patch = plan.patches[0]
    paused = {DP: PAUSE_VALUE, EXPORTER: PAUSE_VALUE}
    assert patch.labels == {STATE_LABEL: UpgradeState.POD_RESTART.value, **paused}
    assert plan.create_jobs == []  # the operands' pods must go before the build starts
    plan = world.step(pk.driver("6.2", rebootRequired=False))
    assert [j[:2] for j in plan.create_jobs] == [("n00", "driver-install")]
    assert world.nodes["n00"].labels[STATE_LABEL] == UpgradeState.UPGRADING.value


def test_a_node_that_finishes_hands_its_slot_on_in_the_same_pass(pk: Any) -> None:
    world = pk.world(installed_cluster(pk, 2))
    config = pk.driver("6.2", maxParallelUpgrades=1, rebootRequired=False)
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


def test_a_restarted_operator_resumes_from_the_labels_and_repeats_no_finished_node(pk: Any) -> None:
    world = pk.world(installed_cluster(pk, 6))
    config = pk.driver("6.2", maxParallelUpgrades=2, maxUnavailableNodes=2, rebootRequired=False)
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


def test_an_invalid_state_label_is_reported_and_the_node_left_alone(pk: Any) -> None:
    world = pk.world(installed_cluster(pk, 1, **{STATE_LABEL: "half-way"}))
    plan = world.step(pk.driver("6.2"))
    assert plan.states["n00"].state == "invalid-state"
    assert "half-way" in plan.states["n00"].message
    assert plan.patches == [] and plan.create_jobs == []


def test_a_node_without_a_single_vendor_label_is_reported(pk: Any) -> None:
    node = NodeInfo("cpu-0", {}, {})
    plan = plan_driver(pk.driver(), [node], {}, now=0)
    assert plan.states["cpu-0"].state == "unknown-vendor" and plan.create_jobs == []


def test_upgrades_disabled_leaves_version_drift_visible(pk: Any) -> None:
    world = pk.world(installed_cluster(pk, 1))
    plan = world.step(
        DriverConfig.model_validate({"enable": True, "version": "6.2", "upgradePolicy": {"enable": False}})
    )
    assert plan.states["n00"].state == "version-drift" and plan.patches == []


def test_with_a_validation_recipe_the_test_runner_must_pass_the_node_first(pk: Any) -> None:
    runner = deploy_label("test-runner")
    nodes = installed_cluster(pk, 2, **{runner: "true"})
    world = pk.world(nodes, validation_recipe="gst_single", failing_validation={"n01"})
    world.nodes["n01"] = dataclasses.replace(
        world.nodes["n01"], annotations={TEST_RESULT: json.dumps({"requestId": "old", "result": "Passed"})}
    )
    config = pk.driver("6.2", maxParallelUpgrades=2, maxUnavailableNodes=2, rebootRequired=False)
    for _ in range(30):
        world.step(config)
    assert world.states() == {"n00": "upgrade-done", "n01": "upgrade-failed"}
    assert sorted(world.answered) == ["n00", "n01"]  # an older answer never counted
    assert "validation recipe gst_single Failed: gpu 0: ECC" in world.nodes["n01"].annotations[FAILURE]
    assert world.nodes["n01"].unschedulable and not world.nodes["n00"].unschedulable


def test_a_validation_nobody_answers_times_out(pk: Any) -> None:
    world = pk.world(
        installed_cluster(pk, 1), validation_recipe="gst_single"
    )  # no test runner pod on the node
    config = pk.driver("6.2", rebootRequired=False)
    for _ in range(120):
        world.step(config)
    assert world.states()["n00"] == "upgrade-failed"
    assert (
        "validation timed out after 900s waiting for an answer to recipe gst_single"
        in world.nodes["n00"].annotations[FAILURE]
    )


def test_without_a_device_plugin_validation_needs_no_gpus_in_allocatable(pk: Any) -> None:
    """With the device plugin off (DRA driver, or nothing advertising GPUs) allocatable never
    fills: a Ready node finishes; with it on, the same node waits and says for what."""
    nodes = {
        name: dataclasses.replace(node, gpus_allocatable=0) for name, node in installed_cluster(pk, 1).items()
    }
    waiting = pk.world(dict(nodes), advertises=False)
    for _ in range(12):
        plan = waiting.step(pk.driver("6.2"))
    assert parse_state(waiting.nodes["n00"].labels[STATE_LABEL]) is UpgradeState.VALIDATING
    assert plan.states["n00"].message == "waiting for the GPUs in allocatable"
    without_plugin = pk.world(dict(nodes), allocatable_expected=False, advertises=False)
    for _ in range(12):
        without_plugin.step(pk.driver("6.2"))
    assert without_plugin.nodes["n00"].labels[STATE_LABEL] == UpgradeState.DONE.value
    assert without_plugin.finished == ["n00"]


def test_an_empty_version_is_the_vendors_default_and_writing_it_out_later_changes_nothing(pk: Any) -> None:
    """The playbook installs `default_driver_versions` for an empty version: the node is labelled
    with that concrete version, so setting it explicitly later is no upgrade and no Job."""
    default = default_driver_versions()["amd"]
    world = pk.world({"n0": pk.gpu_node("n0")})
    first = world.step(pk.driver(""))
    assert [tuple(j) for j in first.create_jobs] == [("n0", "driver-install", "amd", default)]
    for _ in range(3):
        world.step(pk.driver(""))
    assert world.nodes["n0"].labels[VERSION_LABEL] == default
    created = len(world.created)
    explicit = world.step(pk.driver(default))
    assert explicit.patches == [] and explicit.start_patches == [] and explicit.create_jobs == []
    assert explicit.states["n0"].state == "installed" and world.states()["n0"] is None
    assert len(world.created) == created


@pytest.mark.parametrize("spec_version", ["", "default-written-out"])
def test_a_legacy_default_label_is_relabelled_to_the_concrete_default_without_a_job(
    pk: Any, spec_version: str
) -> None:
    """Older operators labelled an empty version `default`; that is the vendor's default version
    (what the playbook installed), so no upgrade, only the label written out."""
    default = default_driver_versions()["amd"]
    version = default if spec_version else ""
    world = pk.world({"n0": pk.gpu_node("n0", **{VERSION_LABEL: "default", DP: "true"})})
    plan = world.step(pk.driver(version))
    assert [p.labels for p in plan.patches] == [{VERSION_LABEL: default}]
    assert plan.create_jobs == [] and plan.start_patches == []
    assert plan.states["n0"].state == "installed" and plan.states["n0"].version == default
    for _ in range(3):
        plan = world.step(pk.driver(version))
        assert plan.patches == [] and plan.create_jobs == []
    assert world.created == [] and STATE_LABEL not in world.nodes["n0"].labels


def test_an_install_job_that_cannot_pull_its_image_is_reported_once_and_replaced_when_the_field_changes(
    pk: Any,
) -> None:
    """Bad input: spec.driver.image names an image no node can pull. The Job never fails (its pod
    stays Pending), so the node says why at once, one Warning Event per Job; the fixed field
    replaces the Job and the install finishes."""
    world = pk.world({"n0": pk.gpu_node("n0")})
    bad = "registry.invalid/gpuop/driver:6.2"
    world.unpullable = {bad}
    broken = pk.driver("6.2").model_copy(update={"image": bad})
    for _ in range(5):
        plan = world.step(broken)
    state = plan.states["n0"]
    assert state.state == "installing"
    assert f"cannot pull image {bad!r}" in state.message and "set spec.driver.image to" in state.message
    assert "ImagePullBackOff" in state.message
    # The DeviceConfig's Degraded message: stable while the kubelet's reason alternates.
    assert plan.pull_problems == {
        "n0": f"driver-install Job driver-install-n0-0 on node n0 cannot pull image {bad!r}; "
        "set spec.driver.image to an image the node can pull"
    }
    assert [r for _, r, _ in world.events] == [PULL_EVENT]  # once, not once per pass
    assert world.created == [("n0", "driver-install")]  # waited on, never failed nor recreated
    fixed = pk.driver("6.2")  # the field cleared: the operator's own image
    for _ in range(6):
        plan = world.step(fixed)
    assert world.created == [("n0", "driver-install")] * 2
    assert world.nodes["n0"].labels[VERSION_LABEL] == "6.2"
    assert PULL_REPORTED not in world.nodes["n0"].annotations and not plan.pull_problems


def test_the_operators_own_image_unpullable_names_the_field_that_would_override_it(pk: Any) -> None:
    world = pk.world({"n0": pk.gpu_node("n0")})
    world.unpullable = {world.operator_image}
    for _ in range(3):
        plan = world.step(pk.driver("6.2"))
    assert "set spec.driver.image (empty: the Job runs the operator's own image)" in plan.states["n0"].message
