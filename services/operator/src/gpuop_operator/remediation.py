"""Node remediation: nodes whose GPUs turned unhealthy are tainted, drained, repaired by a playbook
Job, validated and given back (pure; the reconciler sends the writes, docs/remediation.md).

`plan_remediation` looks at the selected nodes (their conditions, labels and annotations), the
remediation Jobs and their reports, and returns the writes that move each node one step. As in
`driverflow`, everything a run needs to resume lives on the Node, so a restarted operator picks up
where the last one stopped and repeats no finished step:

- the label `gpuop.dev/remediation-state`: `detected -> awaiting-approval (autoStart: false, until
  the label gpuop.dev/remediation-approved=true) -> tainted -> draining -> repairing -> validating
  -> recovered`, or `failed` (left tainted and cordoned for a person; removing the state label
  gives the node back);
- annotations `gpuop.dev/remediation.*`: when the step and the run began (the run's start is also
  its id, written on its Jobs, so a Job of an older run is never taken for this one's), the
  trigger, the GPUs, the finished steps, the repair sub-step, the bootID before a reboot, the taint
  this run put on, and the history of finished runs (the per-node rate limit counts it).

Triggers: the node labeller's `GPUHealthy=False` and any condition of `remediation.conditions`,
once it has held for `conditionHoldSeconds` (its lastTransitionTime). A node in a driver
install/upgrade is not started (and `driverflow` starts no upgrade on a node in remediation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from gpuop_common.config.remediation import RemediationConfig
from gpuop_common.nodemeta import GPU_HEALTHY_CONDITION
from gpuop_common.operandpause import REMEDIATION_PAUSE

from gpuop_operator.drain import NodePod, plan_drain
from gpuop_operator.driverflow import (
    TEST_REQUEST,
    VERSION_LABEL,
    FailedRun,
    NodeEvent,
    RecipeAnswer,
    ask_recipe,
)
from gpuop_operator.driverjob import JobView, Operation, image_field, superseded
from gpuop_operator.model import (
    OPERANDS,
    REMEDIATION_ACTIVE,
    REMEDIATION_APPROVED_LABEL,
    REMEDIATION_STATE_LABEL,
    NodeInfo,
    NodePatch,
)
from gpuop_operator.upgrade import IN_FLIGHT
from gpuop_operator.upgrade import STATE_LABEL as UPGRADE_STATE_LABEL
from gpuop_operator.views import CONDITION_MESSAGE_CHARS

STATE_LABEL = REMEDIATION_STATE_LABEL
APPROVED_LABEL = REMEDIATION_APPROVED_LABEL
GPU_HEALTHY = GPU_HEALTHY_CONDITION  # the node labeller's condition; False names the broken GPUs
_PREFIX = "gpuop.dev/remediation."
SINCE = _PREFIX + "since"  # epoch seconds the current step began
STARTED = _PREFIX + "started"  # epoch seconds the run was started (tainted): the run's id
TRIGGER = _PREFIX + "trigger"  # what started it: `GPUHealthy=False (reason)`
GPUS = _PREFIX + "gpus"  # PCI addresses of the broken GPUs, comma-separated ("" = all)
STEPS = _PREFIX + "steps"  # finished steps of this run, comma-separated
REPAIR = _PREFIX + "repair"  # the repair sub-step: reset, clear-wait, reboot
BOOT_ID = _PREFIX + "boot-id"
ADMIN_CORDON = _PREFIX + "admin-cordoned"
TAINT = _PREFIX + "taint"  # JSON of the taint this run added (removed exactly, whatever the spec says now)
FAILURE = _PREFIX + "failure"
REPORTED = _PREFIX + "reported"  # uid of the failed Job whose task Events were sent
PULL_REPORTED = _PREFIX + "pull-reported"  # uid of the Job whose unpullable image was reported
HISTORY = _PREFIX + "history"  # JSON list of finished runs, newest last
PAUSE = REMEDIATION_PAUSE
PAUSED = PAUSE.annotation  # deploy labels of the operands this run paused, comma-separated
HEALTH_RESET = "gpuop.dev/gpu-health-reset"  # read by the node labeller: a GPU reset happened
RUN_ANNOTATIONS = (
    SINCE,
    STARTED,
    TRIGGER,
    GPUS,
    STEPS,
    REPAIR,
    BOOT_ID,
    ADMIN_CORDON,
    TAINT,
    REPORTED,
    PAUSED,
)
REBOOT_FACT = "reboot_required"  # what the repair playbook's set_stats says when a reset is not enough
VALIDATE_TIMEOUT_S = 600.0
RETRY_S = 5.0
PCI_ADDRESS = re.compile(r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")
RATE_LIMITED = "rate-limited"
_MORE = re.compile(r"\(\+\d+ more\)")  # how the labeller ends a message it had to shorten


class State(StrEnum):
    DETECTED = "detected"
    AWAITING_APPROVAL = "awaiting-approval"
    TAINTED = "tainted"
    DRAINING = "draining"
    REPAIRING = "repairing"
    VALIDATING = "validating"
    RECOVERED = "recovered"
    FAILED = "failed"


assert {s.value for s in (State.TAINTED, State.DRAINING, State.REPAIRING, State.VALIDATING)} == (
    REMEDIATION_ACTIVE
)


def parse_state(value: str | None) -> State | None:
    try:
        return State(value) if value else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Trigger:
    condition: str  # `GPUHealthy=False`
    since: float  # lastTransitionTime
    reason: str = ""
    gpus: tuple[str, ...] = ()  # PCI addresses named in the message

    def describe(self) -> str:
        return f"{self.condition} ({self.reason})" if self.reason else self.condition


def trigger_of(node: NodeInfo, config: RemediationConfig) -> Trigger | None:
    """The first condition of the node that asks for remediation (GPUHealthy first), held or not."""
    wanted = [(GPU_HEALTHY, "False"), *((c.type, c.status) for c in config.conditions)]
    for kind, status in wanted:
        condition = node.conditions.get(kind)
        if condition is not None and condition.status == status:
            gpus = tuple(sorted({a.lower() for a in PCI_ADDRESS.findall(condition.message)}))
            if _MORE.search(condition.message) or len(condition.message) >= CONDITION_MESSAGE_CHARS:
                gpus = ()  # the list was cut short (by the labeller or the cache): reset every GPU
            return Trigger(f"{kind}={status}", condition.since, condition.reason, gpus)
    return None


@dataclass(frozen=True)
class RemediationJob:
    node: str
    operation: Operation
    vendor: str
    run: str  # the run's id (STARTED), written on the Job
    playbook: str  # what the Job runs: remediation.playbook for the reset, node-reboot for a reboot
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeRemediation:
    state: str
    message: str = ""
    history: tuple[Mapping[str, Any], ...] = ()


@dataclass
class RemediationPlan:
    patches: list[NodePatch] = field(default_factory=list)
    create_jobs: list[RemediationJob] = field(default_factory=list)
    delete_jobs: list[JobView] = field(default_factory=list)
    evict: list[NodePod] = field(default_factory=list)
    events: list[NodeEvent] = field(default_factory=list)
    states: dict[str, NodeRemediation] = field(default_factory=dict)
    finished: list[tuple[str, str]] = field(default_factory=list)  # (node, result) of runs ended now
    wake_after: float | None = None
    pull_problems: dict[str, str] = field(default_factory=dict)  # node -> its Job's unpullable image

    def without(self, skipped: set[str]) -> RemediationPlan:
        """The Job, pod and Event writes of every node but `skipped`, whose patch did not apply
        (its step runs again next pass; as `DriverPlan.without`)."""
        if not skipped:
            return self
        return replace(
            self,
            create_jobs=[j for j in self.create_jobs if j.node not in skipped],
            delete_jobs=[j for j in self.delete_jobs if j.node not in skipped],
            evict=[p for p in self.evict if p.node not in skipped],
            events=[e for e in self.events if e.node not in skipped],
            finished=[f for f in self.finished if f[0] not in skipped],
        )

    def wake(self, seconds: float) -> None:
        seconds = max(0.5, seconds)
        self.wake_after = seconds if self.wake_after is None else min(self.wake_after, seconds)


def history_of(node: NodeInfo) -> list[dict[str, Any]]:
    try:
        value = json.loads(node.annotations.get(HISTORY, "") or "[]")
    except ValueError:
        return []
    return [dict(item) for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def runs_in_window(history: Sequence[Mapping[str, Any]], now: float, window_s: float) -> int:
    """Runs that really started (not refused by the limit) within the window."""
    return sum(
        1
        for run in history
        if run.get("result") != RATE_LIMITED and now - float(run.get("start", 0) or 0) < window_s
    )


def _float(text: str | None) -> float:
    try:
        return float(text or 0)
    except ValueError:
        return 0.0


def _steps(node: NodeInfo) -> list[str]:
    return [s for s in node.annotations.get(STEPS, "").split(",") if s]


class _Planner:
    def __init__(
        self,
        config: RemediationConfig,
        *,
        jobs: Mapping[tuple[str, str], JobView],
        reports: Mapping[str, FailedRun],
        node_pods: Mapping[str, Sequence[NodePod]],
        now: float,
        driver_enabled: bool,
        operand_pods: Collection[tuple[str, str]] = (),
        validation_recipe: str | None,
        validation_timeout_s: float,
        allocatable_expected: bool,
        job_image: str = "",
        driver_image: str = "",
    ) -> None:
        self.job_image = job_image  # the image a Job created now runs
        self.driver_image = driver_image  # spec.driver.image, which chooses it
        self.config = config
        self.jobs = jobs
        self.reports = reports
        self.node_pods = node_pods
        self.operand_pods = operand_pods
        self.now = now
        self.driver_enabled = driver_enabled
        self.recipe = validation_recipe if config.validate_after else None
        self.validation_timeout_s = validation_timeout_s
        self.allocatable_expected = allocatable_expected
        self.keep = max(config.history_limit, config.rate_limit.max_runs_per_window)
        self.plan = RemediationPlan()
        self._pull_notes: dict[str, str] = {}  # node -> its Job's unpullable image, with the reason

    # ---------------------------------------------------------------- helpers
    def _patch(
        self,
        node: NodeInfo,
        state: State | None,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        unschedulable: bool | None = None,
        taints: tuple[Mapping[str, str], ...] | None = None,
        event: tuple[str, str] | None = None,
        warning: bool = False,
    ) -> None:
        all_labels: dict[str, str | None] = {STATE_LABEL: state.value if state else None}
        all_labels.update(labels or {})
        all_annotations: dict[str, str | None] = {SINCE: str(int(self.now)) if state else None}
        all_annotations.update(annotations or {})
        label_diff = {k: v for k, v in all_labels.items() if node.labels.get(k) != v}
        annotation_diff = {k: v for k, v in all_annotations.items() if node.annotations.get(k) != v}
        if unschedulable is not None and unschedulable == node.unschedulable:
            unschedulable = None
        if taints is not None and tuple(taints) == node.taints:
            taints = None
        if label_diff or annotation_diff or unschedulable is not None or taints is not None:
            earlier = next((p for p in self.plan.patches if p.node == node.name), None)
            if earlier is not None:  # a second write in the same pass: one patch, later values win
                self.plan.patches.remove(earlier)
                label_diff = {**earlier.labels, **label_diff}
                annotation_diff = {**earlier.annotations, **annotation_diff}
                unschedulable = earlier.unschedulable if unschedulable is None else unschedulable
                taints = earlier.taints if taints is None else taints
            self.plan.patches.append(
                NodePatch(
                    node.name, label_diff, annotation_diff, unschedulable, taints, node.resource_version
                )
            )
        if event is not None:
            self.plan.events.append(NodeEvent(node.name, event[0], event[1][:1000], warning))

    def _state(
        self, node: NodeInfo, state: str, message: str = "", history: list[dict[str, Any]] | None = None
    ) -> None:
        message = self._pull_notes.get(node.name) or message
        shown = (history if history is not None else history_of(node))[-self.config.history_limit :]
        if not self.config.history_limit:
            shown = []
        self.plan.states[node.name] = NodeRemediation(state, message, tuple(shown))

    def after(self, node: NodeInfo) -> NodeInfo:
        """`node` as this pass's patch leaves it, so a step that can follow at once reads it."""
        patch = next((p for p in self.plan.patches if p.node == node.name), None)
        if patch is None:
            return node
        labels = {**node.labels, **patch.labels}
        annotations = {**node.annotations, **patch.annotations}
        return replace(
            node,
            labels={k: v for k, v in labels.items() if v is not None},
            annotations={k: v for k, v in annotations.items() if v is not None},
            unschedulable=node.unschedulable if patch.unschedulable is None else patch.unschedulable,
            taints=node.taints if patch.taints is None else patch.taints,
        )

    def _since(self, node: NodeInfo) -> float:
        return _float(node.annotations.get(SINCE))

    def _taint(self, node: NodeInfo, trigger: str) -> dict[str, str]:
        taint = self.config.taint
        value = taint.value or re.sub(r"[^A-Za-z0-9_.-]", "-", trigger.split("=", 1)[0].rsplit("/", 1)[-1])
        value = value[:63].strip("-_.")
        return {"key": taint.key, "value": value, "effect": taint.effect}

    def _without_ours(self, node: NodeInfo) -> tuple[Mapping[str, str], ...]:
        try:
            ours = json.loads(node.annotations.get(TAINT, "") or "{}")
        except ValueError:
            ours = {}
        key = ours.get("key") if isinstance(ours, dict) else None
        effect = ours.get("effect") if isinstance(ours, dict) else None
        return tuple(t for t in node.taints if not (t.get("key") == key and t.get("effect") == effect))

    def _finish(
        self,
        node: NodeInfo,
        result: str,
        message: str,
        history: list[dict[str, Any]],
        steps: list[str] | None = None,
    ) -> dict[str, str]:
        """The history annotation with this run appended (and the run counted in the metrics)."""
        run: dict[str, Any] = {
            "start": int(_float(node.annotations.get(STARTED)) or self.now),
            "end": int(self.now),
            "trigger": node.annotations.get(TRIGGER, ""),
            "steps": _steps(node) if steps is None else steps,
            "result": result,
        }
        if message:
            run["message"] = message[:300]
        history.append(run)
        self.plan.finished.append((node.name, result))
        return {HISTORY: json.dumps(history[-self.keep :], separators=(",", ":"))}

    def _fail(self, node: NodeInfo, why: str, job: JobView | None = None) -> None:
        """Left tainted and cordoned, for a person (who removes the state label to give it back)."""
        run = self.reports.get(job.uid) if job is not None else None
        message = f"{why}: {run.summary}" if run and run.summary else why
        if job is None or node.annotations.get(REPORTED) != job.uid:
            for task, detail in run.tasks if run else ():
                self.plan.events.append(
                    NodeEvent(node.name, "RemediationFailed", f"task {task!r} failed: {detail}"[:1000], True)
                )
        history = history_of(node)
        annotations: dict[str, str | None] = {
            FAILURE: message[:1000],
            **self._finish(node, "failed", message, history),
        }
        if job is not None:
            annotations[REPORTED] = job.uid
        # The operands come back (the node stays tainted and cordoned): the labeller and exporter
        # keep reporting on the GPUs a person is about to look at.
        self._patch(
            node,
            State.FAILED,
            labels=PAUSE.resumed(node.labels, node.annotations),
            annotations={**annotations, PAUSED: None},
            event=("RemediationFailed", message),
            warning=True,
        )
        self._state(node, State.FAILED.value, message, history)

    def _job(self, node: NodeInfo, operation: Operation, vendor: str, playbook: str) -> JobView | None:
        """This run's Job for `operation`; asks for it when missing, deletes an older run's first."""
        run = node.annotations.get(STARTED, "")
        job = self.jobs.get((node.name, operation))
        if job is not None and (job.deleting or job.run != run or superseded(job, self.job_image)):
            if not job.deleting:
                self.plan.delete_jobs.append(job)
            return None
        if job is not None and job.pulling:
            self._report_pull(node, job)
        if job is None:
            gpus = tuple(g for g in node.annotations.get(GPUS, "").split(",") if g)
            self.plan.create_jobs.append(RemediationJob(node.name, operation, vendor, run, playbook, gpus))
        return job

    def _report_pull(self, node: NodeInfo, job: JobView) -> None:
        """As the driver lifecycle's: a Job whose pod cannot pull its image is never failed by the
        kubelet, so it is reported now (state message, Degraded, one Warning Event per Job); the
        reboot timeout or the Job's deadline still ends the run."""
        problem = job.pull_problem(image_field(self.driver_image))
        self._pull_notes[node.name] = problem
        self.plan.pull_problems[node.name] = job.pull_problem(image_field(self.driver_image), detail=False)
        if node.annotations.get(PULL_REPORTED) == job.uid:
            return
        now = self.after(node)
        self._patch(
            now,
            parse_state(now.labels.get(STATE_LABEL)),
            annotations={PULL_REPORTED: job.uid, SINCE: now.annotations.get(SINCE)},
            event=("RemediationImagePullFailed", problem),
            warning=True,
        )

    def _cleared(self, node: NodeInfo) -> bool:
        return trigger_of(node, self.config) is None

    def _driver_busy(self, node: NodeInfo) -> str:
        if not self.driver_enabled:
            return ""
        state = node.labels.get(UPGRADE_STATE_LABEL, "")
        if state in {s.value for s in IN_FLIGHT}:
            return f"waiting for the driver upgrade ({state}) to finish"
        if not node.labels.get(VERSION_LABEL):
            return "waiting for the driver install"
        return ""

    # ---------------------------------------------------------------- per state
    def idle(self, node: NodeInfo, state: State | None) -> None:
        """No run (or the last one recovered): start one when a trigger has held long enough."""
        if state is None and (STARTED in node.annotations or TAINT in node.annotations):
            self._release(node)
            return
        trigger = trigger_of(node, self.config)
        shown = state.value if state else "healthy"
        if trigger is None:
            if state or HISTORY in node.annotations:
                self._state(node, shown)
            return
        held = self.now - trigger.since
        if held < self.config.condition_hold_seconds:
            self.plan.wake(self.config.condition_hold_seconds - held)
            self._state(
                node,
                shown,
                # No elapsed seconds here: a message that changes every pass would rewrite the status.
                f"{trigger.describe()}; acting once it has held {self.config.condition_hold_seconds}s",
            )
            return
        self._patch(
            node,
            State.DETECTED,
            annotations={TRIGGER: trigger.describe()[:300], GPUS: ",".join(trigger.gpus), FAILURE: None},
            event=(
                "RemediationDetected",
                f"{trigger.describe()}: remediation needed"
                + (f" for GPUs {', '.join(trigger.gpus)}" if trigger.gpus else ""),
            ),
        )
        self._state(node, State.DETECTED.value, trigger.describe())

    def _release(
        self,
        node: NodeInfo,
        reason: str = "RemediationReleased",
        why: str = "state label removed: taint and cordon of the remediation lifted",
    ) -> None:
        """A person removed the state label of a failed (or stuck) run, or remediation was turned
        off: untaint, uncordon (unless an admin had cordoned it), forget the run (not the history)."""
        started = STARTED in node.annotations or TAINT in node.annotations
        self._patch(
            node,
            None,
            labels=PAUSE.resumed(node.labels, node.annotations),
            annotations={**dict.fromkeys(RUN_ANNOTATIONS, None), FAILURE: None},
            unschedulable=False if started and node.annotations.get(ADMIN_CORDON) != "true" else None,
            taints=self._without_ours(node) if started else None,
            event=(reason, why) if started else None,
        )
        self._state(node, "healthy")

    def waiting(self, node: NodeInfo, state: State) -> bool:
        """detected / awaiting-approval: True when the node may start now (the caller checks
        maxParallel); cancels, fails on the rate limit, or waits for approval otherwise."""
        if self._cleared(node):
            self._patch(
                node,
                None,
                annotations={TRIGGER: None, GPUS: None},
                event=("RemediationCancelled", "the condition cleared before the remediation started"),
            )
            self._state(node, "healthy")
            return False
        busy = self._driver_busy(node)
        if busy:
            self._state(node, state.value, busy)
            return False
        limit = self.config.rate_limit
        history = history_of(node)
        runs = runs_in_window(history, self.now, limit.window_seconds)
        if runs >= limit.max_runs_per_window:
            why = (
                f"rate limit: {runs} remediation run(s) in the last {limit.window_seconds}s "
                f"(rateLimit.maxRunsPerWindow {limit.max_runs_per_window}); left tainted for a person"
            )
            taint = self._taint(node, node.annotations.get(TRIGGER, ""))
            annotations = {
                FAILURE: why,
                ADMIN_CORDON: "true" if node.unschedulable else None,
                TAINT: json.dumps(taint, sort_keys=True),
                STARTED: str(int(self.now)),
                **self._finish(node, RATE_LIMITED, why, history),
            }
            self._patch(
                node,
                State.FAILED,
                annotations=annotations,
                unschedulable=True,
                taints=(*self._without_ours(node), taint),
                event=("RemediationRateLimited", why),
                warning=True,
            )
            self._state(node, State.FAILED.value, why, history)
            return False
        if not self.config.auto_start and node.labels.get(APPROVED_LABEL) != "true":
            if state is not State.AWAITING_APPROVAL:
                self._patch(
                    node,
                    State.AWAITING_APPROVAL,
                    event=("RemediationAwaitingApproval", f"set the label {APPROVED_LABEL}=true to start"),
                )
            self._state(node, State.AWAITING_APPROVAL.value, f"waiting for the label {APPROVED_LABEL}=true")
            return False
        return True

    def start(self, node: NodeInfo) -> None:
        """-> tainted: remember an admin's cordon, taint and cordon; the approval is used up."""
        trigger = node.annotations.get(TRIGGER, "")
        taint = self._taint(node, trigger)
        self._patch(
            node,
            State.TAINTED,
            labels={APPROVED_LABEL: None},
            annotations={
                ADMIN_CORDON: "true" if node.unschedulable else None,
                STARTED: str(int(self.now)),
                STEPS: None,
                REPAIR: None,
                BOOT_ID: None,
                REPORTED: None,
                TAINT: json.dumps(taint, sort_keys=True),
            },
            unschedulable=True,
            taints=(*self._without_ours(node), taint),
            event=(
                "RemediationStarted",
                f"{trigger}: node tainted {taint['key']}={taint['value']}:{taint['effect']} and cordoned",
            ),
        )
        self._state(node, State.TAINTED.value)

    def step(self, node: NodeInfo, state: State, vendor: str) -> None:
        if state is State.TAINTED:
            for operation in ("gpu-reset", "node-reboot"):  # an older run's Jobs go now
                job = self.jobs.get((node.name, operation))
                if job is not None and not job.deleting and job.run != node.annotations.get(STARTED, ""):
                    self.plan.delete_jobs.append(job)
            self._patch(node, State.DRAINING, event=("RemediationDraining", "evicting the node's pods"))
            self._state(node, State.DRAINING.value)
        elif state is State.DRAINING:
            self._drain(node, vendor)
        elif state is State.REPAIRING:
            self._repair(node, vendor)
        elif state is State.VALIDATING:
            self._validate(node)

    def _drain(self, node: NodeInfo, vendor: str) -> None:
        if node.name not in self.node_pods:  # not listed: it entered draining in this very pass
            self._state(node, State.DRAINING.value, "listing the node's pods")
            return
        policy = self.config.node_drain_policy
        step = plan_drain(
            self.node_pods.get(node.name, ()),
            gpu_pods_only=False,
            force=policy.force,
            ignore_daemon_sets=policy.ignore_daemon_sets,
            ignore_namespaces=policy.ignore_namespaces,
        )
        if step.refused:
            names = ", ".join(p.key for p in step.refused)
            self._fail(
                node, f"drain refused: {names} not managed by a controller (set nodeDrainPolicy.force)"
            )
            return
        if step.done and self._operands_paused(node):
            self._patch(
                node,
                State.REPAIRING,
                annotations={REPAIR: "reset", STEPS: ",".join([*_steps(node), "drain"])},
                event=("RemediationRepairing", f"running playbook {self.config.playbook}"),
            )
            self._job(node, "gpu-reset", vendor, self.config.playbook)
            self._state(node, State.REPAIRING.value, f"playbook {self.config.playbook}")
            return
        if step.done:  # only the operands are left
            return
        elapsed = self.now - self._since(node)
        if policy.timeout_seconds and elapsed >= policy.timeout_seconds:
            names = ", ".join(p.key for p in (*step.remove, *step.waiting)[:10])
            self._fail(node, f"drain timed out after {policy.timeout_seconds}s; still on the node: {names}")
            return
        self.plan.evict.extend(step.remove)
        self.plan.wake(RETRY_S)
        self._state(node, State.DRAINING.value, f"{len(step.remove) + len(step.waiting)} pod(s) to go")

    def _operands_paused(self, node: NodeInfo) -> bool:
        """Pause the node's GPU operands, then True once their pods are gone: the driver refuses a
        reset while any process (NVML, /dev/dri, /dev/kfd, /dev/nvidia*) holds the GPU open."""
        labels, annotations = PAUSE.pause(node.labels, node.annotations, OPERANDS)
        if labels or annotations:
            self._patch(
                node,
                State.DRAINING,
                labels=labels,
                annotations={**annotations, SINCE: node.annotations.get(SINCE)},
                event=("RemediationPausingOperands", f"pausing {', '.join(sorted(labels))}"),
            )
            self._state(node, State.DRAINING.value, "pausing the GPU operands")
            return False
        left = PAUSE.left(node.annotations, (s for n, s in self.operand_pods if n == node.name))
        if not left:
            return True
        elapsed = self.now - self._since(node)
        timeout = self.config.node_drain_policy.timeout_seconds
        if timeout and elapsed >= timeout:
            self._fail(node, f"operands still on the node {timeout}s after pausing them: {', '.join(left)}")
            return False
        self.plan.wake(RETRY_S)
        self._state(node, State.DRAINING.value, f"waiting for {', '.join(left)} to stop")
        return False

    def _repair(self, node: NodeInfo, vendor: str) -> None:
        sub = node.annotations.get(REPAIR, "reset")
        if sub == "reboot":
            self._reboot(node, vendor)
            return
        if sub == "clear-wait":
            if self._cleared(node):
                self._to_validating(node)
                return
            waited = self.now - self._since(node)
            if waited >= self.config.reset_clear_seconds:
                self._to_reboot(
                    node,
                    vendor,
                    f"the condition did not clear {self.config.reset_clear_seconds}s after the reset",
                )
                return
            self.plan.wake(self.config.reset_clear_seconds - waited)
            self._state(node, State.REPAIRING.value, "waiting for the condition to clear after the reset")
            return
        playbook = self.config.playbook
        job = self._job(node, "gpu-reset", vendor, playbook)
        if job is None or job.phase == "running":
            self._state(node, State.REPAIRING.value, f"playbook {playbook} running")
            return
        report = self.reports.get(job.uid)
        if report is None:
            self._state(node, State.REPAIRING.value, f"reading the result of Job {job.name}")
            return
        if job.phase == "failed":
            why = f"repair Job {job.name} (playbook {playbook}) failed ({job.reason or 'Failed'})"
            if not self.config.reboot_on_reset_failure:
                self._fail(node, why, job)
                return
            # The tool's own words (e.g. the driver refusing the reset) go into the Event.
            told = f"{why}: {report.summary}" if report.summary else why
            self._to_reboot(node, vendor, told, steps=",".join([*_steps(node), "reset-failed"]))
            return
        steps = ",".join([*_steps(node), "reset"])
        if report.facts.get(REBOOT_FACT, "").lower() in ("true", "yes", "1"):
            self._to_reboot(node, vendor, f"playbook {playbook} says a reboot is needed", steps=steps)
        else:
            # The labeller re-takes its health baseline when this changes: sticky failures no reset
            # is visible for (NVIDIA XIDs) are forgotten on its next pass (docs/node-labeller.md).
            reset = {HEALTH_RESET: f"remediation-{node.annotations.get(STARTED, '0')}"}
            # The operands come back now: the labeller is the one that sees the GPU healthy again.
            self._patch(
                node,
                State.REPAIRING,
                labels=PAUSE.resumed(node.labels, node.annotations),
                annotations={REPAIR: "clear-wait", STEPS: steps, PAUSED: None, **reset},
            )
            if self._cleared(node):
                self._to_validating(self.after(node), steps=steps)
                return
            self.plan.wake(float(self.config.reset_clear_seconds))
            self._state(node, State.REPAIRING.value, "waiting for the condition to clear after the reset")

    def _to_reboot(self, node: NodeInfo, vendor: str, why: str, steps: str | None = None) -> None:
        self._patch(
            node,
            State.REPAIRING,
            annotations={
                REPAIR: "reboot",
                BOOT_ID: node.boot_id,
                STEPS: steps or node.annotations.get(STEPS),
            },
            event=("RemediationRebooting", f"{why}: rebooting the node"),
        )
        self._state(node, State.REPAIRING.value, "rebooting")

    def _reboot(self, node: NodeInfo, vendor: str) -> None:
        before = node.annotations.get(BOOT_ID, "")
        if node.boot_id and node.boot_id != before and node.ready:
            self._to_validating(node, steps=",".join([*_steps(node), "reboot"]))
            return
        budget = float(self.config.reboot_timeout_seconds)
        waited = self.now - self._since(node)
        job = self.jobs.get((node.name, "node-reboot"))
        if waited >= budget:
            # The reboot kills its own Job's pod, so a failed Job alone proves nothing; past the
            # timeout its report (when it failed before rebooting) says why.
            mine = job if job is not None and job.run == node.annotations.get(STARTED, "") else None
            failed = mine if mine is not None and mine.phase == "failed" else None
            self._fail(node, f"node did not come back with a new bootID within {int(budget)}s", failed)
            return
        mine = self._job(node, "node-reboot", vendor, "node-reboot")
        report = self.reports.get(mine.uid) if mine is not None and mine.phase == "failed" else None
        if mine is not None and report is not None and report.tasks and report.tasks[0][0] != "(log)":
            # A playbook task failed (the reboot was never asked for): no use waiting.
            self._fail(node, f"reboot Job {mine.name} failed ({mine.reason or 'Failed'})", mine)
            return
        self.plan.wake(budget - waited)
        self._state(node, State.REPAIRING.value, "waiting for a new bootID and Ready")

    def _to_validating(self, node: NodeInfo, steps: str | None = None) -> None:
        self._patch(
            node,
            State.VALIDATING,
            labels=PAUSE.resumed(node.labels, node.annotations),
            annotations={
                REPAIR: None,
                BOOT_ID: None,
                PAUSED: None,
                STEPS: steps or node.annotations.get(STEPS),
            },
            event=("RemediationValidating", "repaired; validating the GPUs"),
        )
        self._state(node, State.VALIDATING.value)
        self._validate(self.after(node))  # often done at once: one patch for both steps

    def _validate(self, node: NodeInfo) -> None:
        budget = VALIDATE_TIMEOUT_S + (self.validation_timeout_s if self.recipe else 0.0)
        gpus_back = node.gpus_allocatable > 0 or not self.allocatable_expected
        waiting = ""
        if not node.ready:
            waiting = "the node to be Ready"
        elif not self._cleared(node):
            waiting = "the trigger condition to clear"
        elif not gpus_back:
            waiting = "the GPUs in allocatable"
        elif self.recipe:
            request_id = f"remediation-{node.annotations.get(STARTED, '0')}"
            answer = ask_recipe(node, self.recipe, request_id)
            if answer.result == "failed":
                self._fail(node, f"validation recipe {self.recipe} {answer.detail}")
                return
            if answer.result == "pending":
                waiting = f"an answer to recipe {self.recipe}"
                self._ask(node, answer)
        if not waiting:
            self._recovered(node)
            return
        waited = self.now - self._since(node)
        if waited >= budget:
            self._fail(node, f"validation timed out after {int(budget)}s waiting for {waiting}")
            return
        self.plan.wake(budget - waited)
        self._state(node, State.VALIDATING.value, f"waiting for {waiting}")

    def _ask(self, node: NodeInfo, answer: RecipeAnswer) -> None:
        if answer.request is not None:
            self._patch(
                node,
                State.VALIDATING,
                annotations={TEST_REQUEST: answer.request, SINCE: node.annotations.get(SINCE)},
            )

    def _recovered(self, node: NodeInfo) -> None:
        steps = [*_steps(node), "validate"]
        history = history_of(node)
        annotations = {
            **dict.fromkeys(RUN_ANNOTATIONS, None),
            FAILURE: None,
            **self._finish(node, "recovered", "", history, steps),
        }
        self._patch(
            node,
            State.RECOVERED,
            labels=PAUSE.resumed(node.labels, node.annotations),
            annotations=annotations,
            unschedulable=False if node.annotations.get(ADMIN_CORDON) != "true" else None,
            taints=self._without_ours(node),
            event=(
                "RemediationSucceeded",
                f"GPUs healthy again after {', '.join(steps)}: taint removed, node uncordoned",
            ),
        )
        self._state(node, State.RECOVERED.value, "", history)


def _vendor(node: NodeInfo) -> str | None:
    vendors = node.vendors()
    return next(iter(vendors)) if len(vendors) == 1 else None


def plan_release(nodes: Sequence[NodeInfo], why: str) -> RemediationPlan:
    """Remediation turned off (or its DeviceConfig deleted): every node a run left its marks on is
    given back, failed ones included (the history annotation stays). A Job still running is left
    to finish; nothing acts on its result."""
    planner = _Planner(
        RemediationConfig(),
        jobs={},
        reports={},
        node_pods={},
        now=0.0,
        driver_enabled=False,
        validation_recipe=None,
        validation_timeout_s=0.0,
        allocatable_expected=False,
    )
    for node in sorted(nodes, key=lambda n: n.name):
        if marked_by_remediation(node):
            planner._release(node, "RemediationStopped", f"{why}: taint and cordon of the remediation lifted")
    return planner.plan


def marked_by_remediation(node: NodeInfo) -> bool:
    """A run left its state label or run annotations on the node (what plan_release gives back)."""
    return STATE_LABEL in node.labels or any(k in node.annotations for k in (*RUN_ANNOTATIONS, FAILURE))


def plan_remediation(
    config: RemediationConfig,
    nodes: Sequence[NodeInfo],
    jobs: Mapping[tuple[str, str], JobView],
    *,
    reports: Mapping[str, FailedRun] | None = None,
    node_pods: Mapping[str, Sequence[NodePod]] | None = None,
    operand_pods: Collection[tuple[str, str]] = (),
    now: float,
    active_elsewhere: int = 0,
    driver_enabled: bool = False,
    validation_recipe: str | None = None,
    validation_timeout_s: float = 3600.0,
    allocatable_expected: bool = True,
    job_image: str = "",
    driver_image: str = "",
) -> RemediationPlan:
    """One pass of remediation over the nodes a DeviceConfig selects (`remediation.enable`).

    `jobs`: (node, operation) -> Job; `reports`: what the pods of finished remediation Jobs said, by
    Job uid (a finished Job not in it waits for the reconciler to read its pod); `node_pods`: the
    pods of nodes being drained; `operand_pods`: (node, service) of the operand pods still present
    (a reset waits for those it paused to be gone); `active_elsewhere`: nodes of other
    DeviceConfigs in remediation (`maxParallel` counts the whole cluster); `driver_enabled`: the
    driver lifecycle runs on these nodes (a node installing or upgrading it is not started);
    `validation_recipe`: the test runner's recipe a node must pass (with `validateAfter`) before
    it is given back; `job_image`: the image a Job created now runs (a Job stuck pulling another one
    is replaced), `driver_image`: spec.driver.image, named when a Job's image cannot be pulled."""
    planner = _Planner(
        config,
        jobs=jobs,
        reports=reports or {},
        node_pods=node_pods or {},
        operand_pods=operand_pods,
        now=now,
        driver_enabled=driver_enabled,
        validation_recipe=validation_recipe,
        validation_timeout_s=validation_timeout_s,
        allocatable_expected=allocatable_expected,
        job_image=job_image,
        driver_image=driver_image,
    )
    active = active_elsewhere
    ready_to_start: list[NodeInfo] = []
    for node in sorted(nodes, key=lambda n: n.name):
        raw = node.labels.get(STATE_LABEL)
        state = parse_state(raw)
        if raw and state is None:
            planner._state(node, "invalid-state", f"label {STATE_LABEL}={raw!r} is not a state: remove it")
            continue
        if state is not None and state.value in REMEDIATION_ACTIVE:
            active += 1
        vendor = _vendor(node)
        if state in (None, State.RECOVERED):
            planner.idle(node, state)
            # Detected just now: whether it may start is known in this same pass.
            moved = planner.after(node)
            if parse_state(moved.labels.get(STATE_LABEL)) is State.DETECTED and planner.waiting(
                moved, State.DETECTED
            ):
                ready_to_start.append(moved)
        elif state in (State.DETECTED, State.AWAITING_APPROVAL):
            if planner.waiting(node, state):
                ready_to_start.append(node)
        elif state is State.FAILED:
            planner._state(node, State.FAILED.value, node.annotations.get(FAILURE, ""))
        elif vendor is None:
            planner._state(node, state.value, "the node has no single GPU vendor label (NFD PCI labels)")
        else:
            planner.step(node, state, vendor)
    limit = config.max_parallel or None
    for node in ready_to_start:
        if limit is not None and active >= limit:
            planner._state(
                node,
                node.labels.get(STATE_LABEL, State.DETECTED.value),
                f"waiting for a slot (maxParallel {limit})",
            )
            continue
        planner.start(node)
        active += 1
        vendor = _vendor(node)
        if vendor is not None:  # tainted -> draining in the same patch; the drain lists pods next pass
            planner.step(planner.after(node), State.TAINTED, vendor)
    return planner.plan
