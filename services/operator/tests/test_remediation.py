"""The remediation planner (pure): each pass's writes applied to plain nodes, step by step."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from gpuop_common.config.driver import DriverConfig
from gpuop_common.config.remediation import RemediationConfig
from gpuop_operator.drain import NodePod
from gpuop_operator.driverflow import TEST_REQUEST, TEST_RESULT, VERSION_LABEL, FailedRun, plan_driver
from gpuop_operator.driverjob import JobView
from gpuop_operator.model import AMD_PRESENT, NodeCondition, NodeInfo, NodePatch
from gpuop_operator.remediation import (
    APPROVED_LABEL,
    GPUS,
    HISTORY,
    STARTED,
    STATE_LABEL,
    STEPS,
    RemediationPlan,
    plan_release,
    plan_remediation,
    trigger_of,
)
from gpuop_operator.upgrade import STATE_LABEL as UPGRADE_STATE

NOW = 1_000_000.0
BAD = NodeCondition(
    "False", since=NOW - 120, reason="RasUncorrectable", message="GPUs 0000:c1:00.0, 0000:C2:00.0 unhealthy"
)


def gpu_node(name: str = "n0", *, healthy: bool = False, **labels: str) -> NodeInfo:
    conditions = {} if healthy else {"GPUHealthy": BAD}
    return NodeInfo(
        name,
        {AMD_PRESENT: "true", VERSION_LABEL: "6.2", **labels},
        {},
        boot_id="boot-1",
        gpus_allocatable=8,
        conditions=conditions,
        taints=({"key": "other", "value": "x", "effect": "NoSchedule"},),
        resource_version="7",
    )


def apply(node: NodeInfo, patch: NodePatch) -> NodeInfo:
    labels = {**node.labels, **patch.labels}
    annotations = {**node.annotations, **patch.annotations}
    return replace(
        node,
        labels={k: v for k, v in labels.items() if v is not None},
        annotations={k: v for k, v in annotations.items() if v is not None},
        unschedulable=node.unschedulable if patch.unschedulable is None else patch.unschedulable,
        taints=node.taints if patch.taints is None else patch.taints,
    )


def job(node: str, operation: str, run: str, phase: str = "succeeded", uid: str = "") -> JobView:
    return JobView(
        name=f"gpuop-{operation}-{node}",
        uid=uid or f"{operation}-{run}",
        node=node,
        operation=operation,
        version="",
        phase=phase,  # type: ignore[arg-type]
        run=run,
    )


class Walk:
    """Nodes, Jobs and reports as the reconciler would hold them; `step` runs one pass."""

    def __init__(self, config: dict[str, Any], *nodes: NodeInfo, **kwargs: Any) -> None:
        self.config = RemediationConfig.model_validate({"enable": True, "conditionHoldSeconds": 60, **config})
        self.nodes = {n.name: n for n in nodes}
        self.jobs: dict[tuple[str, str], JobView] = {}
        self.reports: dict[str, FailedRun] = {}
        self.pods: dict[str, list[NodePod]] = {}
        self.operand_pods: set[tuple[str, str]] = set()  # (node, service) still present
        self.now = NOW
        self.kwargs = kwargs
        self.plans: list[RemediationPlan] = []

    def step(self, seconds: float = 1.0) -> RemediationPlan:
        self.now += seconds
        plan = plan_remediation(
            self.config,
            list(self.nodes.values()),
            self.jobs,
            reports=self.reports,
            # As the reconciler lists them: the pods of the nodes draining when the pass begins.
            node_pods={n: self.pods.get(n, []) for n in self.nodes if self.state(n) == "draining"},
            operand_pods=frozenset(self.operand_pods),
            now=self.now,
            **self.kwargs,
        )
        for patch in plan.patches:
            self.nodes[patch.node] = apply(self.nodes[patch.node], patch)
        for created in plan.create_jobs:
            self.jobs[(created.node, created.operation)] = job(
                created.node, created.operation, created.run, "running"
            )
        for deleted in plan.delete_jobs:
            self.jobs.pop((deleted.node, deleted.operation), None)
        self.plans.append(plan)
        return plan

    def state(self, name: str = "n0") -> str | None:
        return self.nodes[name].labels.get(STATE_LABEL)

    def finish(self, operation: str, name: str = "n0", phase: str = "succeeded", **facts: str) -> None:
        running = self.jobs[(name, operation)]
        self.jobs[(name, operation)] = replace(running, phase=phase)  # type: ignore[arg-type]
        tasks = (("reset the GPUs", "amd-smi: reset failed on 0000:c1:00.0"),) if phase == "failed" else ()
        self.reports[running.uid] = FailedRun(summary=tasks[0][1] if tasks else "", tasks=tasks, facts=facts)

    def heal(self, name: str = "n0") -> None:
        self.nodes[name] = replace(
            self.nodes[name], conditions={"GPUHealthy": NodeCondition("True", since=self.now)}
        )

    def events(self) -> list[str]:
        return [e.reason for plan in self.plans for e in plan.events]


def test_the_labeller_condition_names_the_gpus_and_other_conditions_count_when_listed() -> None:
    config = RemediationConfig.model_validate({"conditions": [{"type": "KernelDeadlock"}]})
    trigger = trigger_of(gpu_node(), config)
    assert trigger is not None and trigger.gpus == ("0000:c1:00.0", "0000:c2:00.0")
    assert trigger.describe() == "GPUHealthy=False (RasUncorrectable)"
    deadlock = replace(gpu_node(healthy=True), conditions={"KernelDeadlock": NodeCondition("True")})
    assert trigger_of(deadlock, config) is not None
    assert trigger_of(deadlock, RemediationConfig()) is None
    assert trigger_of(gpu_node(healthy=True), config) is None
    cut = replace(BAD, message="3 of 8 GPUs unhealthy: 0000:c1:00.0: RAS; (+2 more)")
    shortened = trigger_of(replace(gpu_node(), conditions={"GPUHealthy": cut}), config)
    assert shortened is not None and shortened.gpus == ()  # not all named: every GPU


def test_a_full_run_taints_drains_resets_validates_and_gives_the_node_back() -> None:
    walk = Walk({}, gpu_node())
    walk.pods["n0"] = [NodePod("default", "work", "u1", "ReplicaSet", node="n0")]
    plan = walk.step()
    node = walk.nodes["n0"]
    # detected -> tainted -> draining need nothing from outside the pass: one patch.
    assert walk.state() == "draining" and node.unschedulable and len(plan.patches) == 1
    assert {"key": "gpuop.dev/gpu-unhealthy", "value": "GPUHealthy", "effect": "NoSchedule"} in node.taints
    assert plan.patches[0].resource_version == "7"  # a taint write is conditional
    assert plan.evict == []  # the pods are listed once the node is draining
    plan = walk.step()
    assert walk.state() == "draining" and [p.name for p in plan.evict] == ["work"]
    walk.pods["n0"] = []
    plan = walk.step()
    assert walk.state() == "repairing"
    (created,) = plan.create_jobs
    assert (created.operation, created.playbook) == ("gpu-reset", "gpu-reset")
    assert created.gpus == ("0000:c1:00.0", "0000:c2:00.0")
    assert created.run == walk.nodes["n0"].annotations[STARTED]
    walk.step()
    assert walk.plans[-1].create_jobs == []  # the running Job is this run's
    walk.finish("gpu-reset", reboot_required="false")
    walk.heal()
    plan = walk.step()  # validated in the same pass: nothing else to wait for
    node = walk.nodes["n0"]
    assert walk.state() == "recovered" and not node.unschedulable and len(plan.patches) == 1
    assert node.taints == ({"key": "other", "value": "x", "effect": "NoSchedule"},)  # only ours removed
    assert STARTED not in node.annotations and STEPS not in node.annotations
    assert node.annotations["gpuop.dev/gpu-health-reset"] == f"remediation-{created.run}"  # for the labeller
    (run,) = json.loads(node.annotations[HISTORY])
    assert run["steps"] == ["drain", "reset", "validate"] and run["result"] == "recovered"
    assert run["trigger"] == "GPUHealthy=False (RasUncorrectable)"
    assert plan.finished == [("n0", "recovered")]
    assert walk.events() == [
        "RemediationDetected",
        "RemediationStarted",
        "RemediationDraining",
        "RemediationRepairing",
        "RemediationValidating",
        "RemediationSucceeded",
    ]
    assert plan.states["n0"].history[0]["result"] == "recovered"


def test_a_condition_younger_than_the_hold_time_waits_and_wakes_when_it_is_due() -> None:
    young = replace(gpu_node(), conditions={"GPUHealthy": replace(BAD, since=NOW - 10)})
    walk = Walk({}, young)
    plan = walk.step()
    assert walk.state() is None and plan.wake_after == pytest.approx(49.0)


def test_a_reset_that_says_reboot_reboots_and_a_new_boot_id_moves_on() -> None:
    walk = Walk({}, gpu_node())
    for _ in range(4):
        walk.step()
    assert walk.state() == "repairing"
    walk.finish("gpu-reset", reboot_required="true")
    walk.step()
    plan = walk.step()
    assert [j.operation for j in plan.create_jobs] == ["node-reboot"]
    walk.step()
    assert walk.state() == "repairing" and walk.plans[-1].create_jobs == []
    walk.nodes["n0"] = replace(walk.nodes["n0"], boot_id="boot-2")
    walk.heal()
    walk.step()
    walk.step()
    assert walk.state() == "recovered"
    assert json.loads(walk.nodes["n0"].annotations[HISTORY])[0]["steps"] == [
        "drain",
        "reset",
        "reboot",
        "validate",
    ]
    assert "RemediationRebooting" in walk.events()
    assert "gpuop.dev/gpu-health-reset" not in walk.nodes["n0"].annotations  # the reboot re-baselines


def test_a_condition_that_does_not_clear_after_the_reset_leads_to_a_reboot() -> None:
    walk = Walk({"resetClearSeconds": 30}, gpu_node())
    for _ in range(4):
        walk.step()
    walk.finish("gpu-reset")
    walk.step()
    assert walk.nodes["n0"].annotations["gpuop.dev/remediation.repair"] == "clear-wait"
    walk.step(10)
    assert walk.nodes["n0"].annotations["gpuop.dev/remediation.repair"] == "clear-wait"
    walk.step(25)
    assert walk.nodes["n0"].annotations["gpuop.dev/remediation.repair"] == "reboot"


def test_a_failed_reset_fails_the_node_with_the_task_error_and_leaves_it_tainted() -> None:
    walk = Walk({"rebootOnResetFailure": False}, gpu_node())
    for _ in range(4):
        walk.step()
    walk.finish("gpu-reset", phase="failed")
    plan = walk.step()
    node = walk.nodes["n0"]
    assert walk.state() == "failed" and node.unschedulable
    assert any(t["key"] == "gpuop.dev/gpu-unhealthy" for t in node.taints)
    messages = [e.message for e in plan.events if e.warning]
    assert "task 'reset the GPUs' failed: amd-smi: reset failed on 0000:c1:00.0" in messages
    assert plan.finished == [("n0", "failed")]
    walk.step()
    assert walk.plans[-1].events == []  # reported once
    # A person removes the state label: the node is given back.
    walk.nodes["n0"] = replace(node, labels={k: v for k, v in node.labels.items() if k != STATE_LABEL})
    walk.heal()
    plan = walk.step()
    node = walk.nodes["n0"]
    assert not node.unschedulable and len(node.taints) == 1 and STARTED not in node.annotations
    assert [e.reason for e in plan.events] == ["RemediationReleased"]


def test_a_reset_the_driver_refuses_escalates_to_a_reboot_with_the_tools_message() -> None:
    walk = Walk({}, gpu_node())
    for _ in range(4):
        walk.step()
    walk.finish("gpu-reset", phase="failed")
    plan = walk.step()
    assert walk.state() == "repairing"
    assert walk.nodes["n0"].annotations["gpuop.dev/remediation.repair"] == "reboot"
    rebooting = [e.message for e in plan.events if e.reason == "RemediationRebooting"]
    assert rebooting and "amd-smi: reset failed on 0000:c1:00.0" in rebooting[0]
    assert plan.finished == []
    walk.step()
    assert ("n0", "node-reboot") in walk.jobs
    walk.nodes["n0"] = replace(walk.nodes["n0"], boot_id="boot-2")
    walk.heal()
    walk.step()
    assert walk.state() == "recovered"
    history = json.loads(walk.nodes["n0"].annotations[HISTORY])
    assert history[-1]["steps"] == ["drain", "reset-failed", "reboot", "validate"]


DP, LABELLER = "gpuop.dev/deploy.device-plugin", "gpuop.dev/deploy.node-labeller"


def test_the_operands_are_paused_and_gone_before_the_reset_and_back_after_it() -> None:
    walk = Walk({}, gpu_node(**{DP: "true", LABELLER: "true", "gpuop.dev/deploy.config-manager": "held"}))
    walk.operand_pods = {("n0", "device-plugin"), ("n0", "node-labeller")}
    seen: list[tuple[str | None, str | None, bool]] = []
    for _ in range(4):
        walk.step()
        seen.append((walk.state(), walk.nodes["n0"].labels[DP], ("n0", "gpu-reset") in walk.jobs))
    labels = walk.nodes["n0"].labels
    assert labels[DP] == labels[LABELLER] == "paused-for-remediation"
    assert labels["gpuop.dev/deploy.config-manager"] == "held"  # not ours to pause
    assert ("n0", "gpu-reset") not in walk.jobs  # their pods are still there
    walk.operand_pods = {("n0", "node-labeller")}
    walk.step()
    assert ("n0", "gpu-reset") not in walk.jobs
    walk.operand_pods = set()
    walk.step()
    assert ("n0", "gpu-reset") in walk.jobs and walk.state() == "repairing"
    walk.finish("gpu-reset")
    walk.step()
    labels = walk.nodes["n0"].labels
    assert labels[DP] == labels[LABELLER] == "true"  # back: the labeller clears the condition
    walk.heal()
    walk.step()
    assert walk.state() == "recovered"
    assert "gpuop.dev/remediation.paused" not in walk.nodes["n0"].annotations
    assert "RemediationPausingOperands" in walk.events()


def test_operands_paused_by_a_run_that_fails_come_back_with_the_node_left_tainted() -> None:
    walk = Walk({"rebootOnResetFailure": False}, gpu_node(**{DP: "true"}))
    for _ in range(5):
        walk.step()
    assert walk.nodes["n0"].labels[DP] == "paused-for-remediation"
    walk.finish("gpu-reset", phase="failed")
    walk.step()
    assert walk.state() == "failed" and walk.nodes["n0"].labels[DP] == "true"
    assert walk.nodes["n0"].unschedulable


def test_without_auto_start_a_node_waits_for_the_approval_label_which_is_used_up() -> None:
    walk = Walk({"autoStart": False}, gpu_node())
    walk.step()
    walk.step()
    walk.step()
    assert walk.state() == "awaiting-approval" and not walk.nodes["n0"].unschedulable
    assert walk.events() == ["RemediationDetected", "RemediationAwaitingApproval"]
    walk.nodes["n0"] = replace(walk.nodes["n0"], labels={**walk.nodes["n0"].labels, APPROVED_LABEL: "true"})
    walk.step()
    assert walk.state() == "draining" and APPROVED_LABEL not in walk.nodes["n0"].labels


def test_a_condition_that_clears_before_the_start_cancels_the_run() -> None:
    walk = Walk({"autoStart": False}, gpu_node())
    walk.step()
    walk.step()
    walk.heal()
    walk.step()
    assert walk.state() is None and walk.events()[-1] == "RemediationCancelled"


def test_max_parallel_counts_the_whole_cluster_and_starts_in_name_order() -> None:
    walk = Walk({"maxParallel": 2}, gpu_node("a"), gpu_node("b"), gpu_node("c"), active_elsewhere=1)
    walk.step()
    assert [walk.state(n) for n in "abc"] == ["draining", "detected", "detected"]
    assert "maxParallel 2" in walk.plans[-1].states["b"].message


def test_the_rate_limit_fails_the_node_tainted_with_an_event_saying_why() -> None:
    history = [
        {"start": int(NOW - 100), "end": int(NOW - 50), "result": "recovered", "steps": [], "trigger": ""}
    ]
    node = replace(gpu_node(), annotations={HISTORY: json.dumps(history)})
    walk = Walk({"rateLimit": {"maxRunsPerWindow": 1, "windowSeconds": 3600}}, node)
    plan = walk.step()
    node = walk.nodes["n0"]
    assert walk.state() == "failed" and node.unschedulable
    assert any(t["key"] == "gpuop.dev/gpu-unhealthy" for t in node.taints)
    detected, event = plan.events
    assert detected.reason == "RemediationDetected"
    assert event.reason == "RemediationRateLimited" and event.warning
    assert "1 remediation run(s) in the last 3600s" in event.message
    assert plan.finished == [("n0", "rate-limited")]
    # Outside the window the same history allows a run.
    walk = Walk(
        {"rateLimit": {"maxRunsPerWindow": 1, "windowSeconds": 60}},
        replace(gpu_node(), annotations={HISTORY: json.dumps(history)}),
    )
    walk.step()
    assert walk.state() == "draining"


def test_an_older_runs_job_is_deleted_not_taken_for_this_runs() -> None:
    walk = Walk({}, gpu_node())
    walk.jobs[("n0", "gpu-reset")] = job("n0", "gpu-reset", "12345")  # succeeded, an old run
    plan = walk.step()  # tainted -> draining drops it
    assert [j.run for j in plan.delete_jobs] == ["12345"]
    plan = walk.step()
    assert walk.state() == "repairing" and [j.operation for j in plan.create_jobs] == ["gpu-reset"]


def test_resuming_from_the_node_alone_repeats_no_finished_step() -> None:
    """A new planner (a restarted operator) with the same node and Jobs: no second Job, no event
    of an earlier step."""
    walk = Walk({}, gpu_node())
    for _ in range(4):
        walk.step()
    assert walk.state() == "repairing"
    fresh = Walk({}, *walk.nodes.values())
    fresh.jobs, fresh.now = dict(walk.jobs), walk.now
    plan = fresh.step()
    assert plan.create_jobs == [] and plan.patches == [] and plan.events == []


def test_a_node_in_a_driver_upgrade_is_not_started_and_an_upgrade_waits_for_remediation() -> None:
    upgrading = gpu_node(**{UPGRADE_STATE: "draining"})
    walk = Walk({}, upgrading, driver_enabled=True)
    walk.step()
    walk.step()
    assert walk.state() == "detected" and "driver upgrade" in walk.plans[-1].states["n0"].message
    remediating = gpu_node(**{UPGRADE_STATE: "upgrade-required", STATE_LABEL: "repairing"})
    driver = DriverConfig.model_validate({"enable": True, "version": "6.3"})
    plan = plan_driver(driver, [remediating], {}, now=NOW)
    assert plan.patches == [] and "remediation" in plan.states["n0"].message


def test_validation_asks_the_test_runner_and_a_failed_answer_fails_the_run() -> None:
    walk = Walk({}, gpu_node(), validation_recipe="quick")
    for _ in range(4):
        walk.step()
    walk.finish("gpu-reset")
    walk.heal()
    walk.step()
    walk.step()
    node = walk.nodes["n0"]
    request_id = f"remediation-{node.annotations[STARTED]}"
    assert walk.state() == "validating" and node.annotations[TEST_REQUEST] == f"quick:{request_id}"
    answer = {"requestId": request_id, "result": "Failed", "reason": "GpuHung"}
    walk.nodes["n0"] = replace(node, annotations={**node.annotations, TEST_RESULT: json.dumps(answer)})
    walk.step()
    assert walk.state() == "failed"
    assert (
        "validation recipe quick Failed: GpuHung"
        in walk.nodes["n0"].annotations["gpuop.dev/remediation.failure"]
    )


def test_gpus_annotation_is_written_at_detection() -> None:
    walk = Walk({}, gpu_node())
    walk.step()
    assert walk.nodes["n0"].annotations[GPUS] == "0000:c1:00.0,0000:c2:00.0"


def test_turning_remediation_off_gives_back_every_node_a_run_marked() -> None:
    walk = Walk({"maxParallel": 0}, gpu_node("a"), gpu_node("b"), gpu_node("c", healthy=True))
    walk.nodes["a"] = replace(walk.nodes["a"], unschedulable=True)  # an admin's cordon
    walk.step()
    assert walk.state("a") == "draining" and walk.state("b") == "draining"
    plan = plan_release(list(walk.nodes.values()), "remediation.enable is false")
    for patch in plan.patches:
        walk.nodes[patch.node] = apply(walk.nodes[patch.node], patch)
    assert [p.node for p in plan.patches] == ["a", "b"]  # c carries nothing of a run
    for name in "ab":
        node = walk.nodes[name]
        assert STATE_LABEL not in node.labels and STARTED not in node.annotations
        assert node.taints == ({"key": "other", "value": "x", "effect": "NoSchedule"},)
    assert walk.nodes["a"].unschedulable and not walk.nodes["b"].unschedulable
    assert {e.reason for e in plan.events} == {"RemediationStopped"}


def test_a_reset_job_that_cannot_pull_its_image_is_reported_once_and_replaced_when_the_field_changes() -> (
    None
):
    """Bad input: spec.driver.image (which the remediation Jobs run too) names an image no node can
    pull. The Job's pod stays Pending and the Job active, never failed: the node's state says why at
    once, one Warning Event; fixing the field replaces the Job within the same run."""
    bad = "registry.invalid/gpuop/driver:6.2"
    walk = Walk({}, gpu_node(), job_image=bad, driver_image=bad)
    walk.step()
    walk.step()
    assert walk.state() == "repairing"
    key = ("n0", "gpu-reset")
    walk.jobs[key] = replace(
        walk.jobs[key],
        image=bad,
        pull_reason="ErrImagePull",
        pull_message=f'Failed to pull image "{bad}": not found',
    )
    for _ in range(3):
        plan = walk.step()
    message = plan.states["n0"].message
    assert f"gpu-reset Job gpuop-gpu-reset-n0 on node n0 cannot pull image {bad!r}" in message
    assert "set spec.driver.image to an image the node can pull" in message
    assert plan.pull_problems == {
        "n0": f"gpu-reset Job gpuop-gpu-reset-n0 on node n0 cannot pull image {bad!r}; "
        "set spec.driver.image to an image the node can pull"
    }
    assert walk.events().count("RemediationImagePullFailed") == 1
    assert walk.state() == "repairing" and plan.create_jobs == [] and plan.delete_jobs == []
    walk.kwargs.update(job_image="ghcr.io/gpuop/gpuop-operator:0.1.0", driver_image="")
    plan = walk.step()
    assert [j.operation for j in plan.delete_jobs] == ["gpu-reset"]
    plan = walk.step()
    assert [j.operation for j in plan.create_jobs] == ["gpu-reset"] and walk.state() == "repairing"
