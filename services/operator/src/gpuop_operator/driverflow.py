"""The driver lifecycle of the nodes of one DeviceConfig: install, then rolling upgrades (pure).

`plan_driver` looks at the selected nodes, the driver Jobs and (for nodes being drained) the pods
on them, and returns the writes that move each node one step; the reconciler sends them. Everything
it needs to resume lives on the Node (labels and annotations below), so a restarted operator picks
up where the last one stopped and repeats no finished step.

- Install: a node with no `gpuop.dev/driver.version` gets the driver-install Job; success writes the
  label (the node's operands then roll out), failure marks the node `upgrade-failed` with the task's
  error in an Event and an annotation, until a person sets the state back to `upgrade-required`.
- Upgrade: a node whose installed version differs from `spec.driver.version` becomes
  `upgrade-required`; `upgrade.plan_upgrades` starts nodes within the bounds, and each walks
  cordon -> drain (Eviction API, PDB refusals retried until the timeout; or only GPU pods deleted)
  -> pause its GPU operands -> the install Job -> reboot (bootID must change) -> resume operands and
  wait for the GPUs in allocatable -> uncordon (not a node an admin had cordoned) -> `upgrade-done`.
- Uninstall: `driveruninstall` walks the same steps with the driver-uninstall Job, as a subclass of
  `DriverPlanner` (the hooks below marked "uninstall overrides"). A Job running when the mode flips
  is never cut short: it ends, then the other mode's Job runs.
- A node labelled `default` by an older operator (before concrete versions) is relabelled to the
  vendor's default version, without a Job: that is what the playbook installed for it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple, Required, TypedDict, Unpack

from gpuop_common.config.driver import DriverConfig
from gpuop_common.nodemeta import DRIVER_FAILURE_ANNOTATION, DRIVER_VERSION_LABEL
from gpuop_common.operandpause import DRIVER_UPGRADE_PAUSE

from gpuop_operator.drain import NodePod, plan_drain
from gpuop_operator.driverdefaults import concrete_label, resolved_version
from gpuop_operator.driverjob import JobView, Operation, image_field, superseded
from gpuop_operator.model import (
    OPERANDS,
    REMEDIATION_ACTIVE,
    REMEDIATION_STATE_LABEL,
    NodeInfo,
    NodePatch,
)
from gpuop_operator.upgrade import (
    FAILED_STATES,
    STATE_LABEL,
    WAITING,
    NodeView,
    UpgradeState,
    parse_state,
    plan_upgrades,
)

VERSION_LABEL = DRIVER_VERSION_LABEL
SINCE = "gpuop.dev/driver-upgrade.since"  # epoch seconds the current step began
STARTED = "gpuop.dev/driver-upgrade.started"  # epoch seconds the walk began (for its duration)
ADMIN_CORDON = "gpuop.dev/driver-upgrade.admin-cordoned"
PAUSE = DRIVER_UPGRADE_PAUSE
PAUSED = PAUSE.annotation  # operands this upgrade paused, comma-separated
BOOT_ID = "gpuop.dev/driver-upgrade.boot-id"  # bootID before the reboot
FAILURE = DRIVER_FAILURE_ANNOTATION  # why the last install/upgrade failed
REPORTED = "gpuop.dev/driver.reported"  # uid of the failed Job whose Events were sent
PULL_REPORTED = "gpuop.dev/driver.pull-reported"  # uid of the Job whose unpullable image was reported
PULL_EVENT = "DriverImagePullFailed"
PAUSE_VALUE = PAUSE.value
VALIDATE_TIMEOUT_S = 600.0
RETRY_S = 5.0  # a refused eviction is tried again this soon
# Steps that need nothing from outside the pass to begin (see `DriverPlanner.walk`). Validating may
# begin in the pass that resumes the operands: it reads the node as the pass found it, with the
# device plugin still paused, whose devices the kubelet marked unhealthy (out of allocatable) when
# it disconnected; so with a device plugin it waits for a later pass that sees them back, and
# without one a Ready node (and the recipe) is all it ever needed.
_CHAINED = frozenset(
    {UpgradeState.CORDONED, UpgradeState.DRAINING, UpgradeState.POD_RESTART, UpgradeState.VALIDATING}
)
STEP_ANNOTATIONS = (SINCE, STARTED, ADMIN_CORDON, PAUSED, BOOT_ID)
# The test runner's operator API (docs/test-runner.md): a request annotation, answered in JSON.
TEST_REQUEST = "gpuop.dev/test-request"
TEST_RESULT = "gpuop.dev/test-result"


@dataclass(frozen=True)
class NodeEvent:
    node: str
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class DriverNodeState:
    state: str  # installing, installed, upgrade-required, cordoned, ..., upgrade-done, upgrade-failed
    version: str  # installed version, "" when none
    message: str = ""
    wanted: str = ""  # the version this node should have (the vendor's default when the spec has none)


class JobRequest(NamedTuple):
    node: str
    operation: Operation
    vendor: str
    version: str  # the concrete version the Job installs (or, uninstalling, removes)


@dataclass
class DriverPlan:
    patches: list[NodePatch] = field(default_factory=list)  # at most one per node
    # Patches of the nodes this pass starts: sent only once every patch above applied, so a
    # finished node's slot is given to the next one only after that node really left the walk.
    start_patches: list[NodePatch] = field(default_factory=list)
    create_jobs: list[JobRequest] = field(default_factory=list)
    delete_jobs: list[JobView] = field(default_factory=list)
    evict: list[NodePod] = field(default_factory=list)
    delete_pods: list[NodePod] = field(default_factory=list)
    events: list[NodeEvent] = field(default_factory=list)
    states: dict[str, DriverNodeState] = field(default_factory=dict)
    wake_after: float | None = None  # seconds until a time-based step is due again
    finished: list[tuple[str, float]] = field(default_factory=list)  # (node, walk seconds) done now
    pull_problems: dict[str, str] = field(default_factory=dict)  # node -> its Job's unpullable image

    def without(self, skipped: set[str]) -> DriverPlan:
        """The Job, pod and Event writes of every node but `skipped` (whose patch did not apply:
        their step runs again next pass, so its writes would come early or twice)."""
        if not skipped:
            return self
        return replace(
            self,
            create_jobs=[j for j in self.create_jobs if j[0] not in skipped],
            delete_jobs=[j for j in self.delete_jobs if j.node not in skipped],
            evict=[p for p in self.evict if p.node not in skipped],
            delete_pods=[p for p in self.delete_pods if p.node not in skipped],
            events=[e for e in self.events if e.node not in skipped],
        )

    def wake(self, seconds: float) -> None:
        self.wake_after = seconds if self.wake_after is None else min(self.wake_after, seconds)


def installed(node: NodeInfo) -> bool:
    """The driver stage is done on this node: some version installed by us (an upgrade pauses the
    operands itself, so a node mid-upgrade does not fall back to `driver-installing`)."""
    return bool(node.labels.get(VERSION_LABEL))


def _since(node: NodeInfo) -> float:
    try:
        return float(node.annotations.get(SINCE, "0"))
    except ValueError:
        return 0.0


def _vendor(node: NodeInfo) -> str | None:
    vendors = node.vendors()
    return next(iter(vendors)) if len(vendors) == 1 else None


@dataclass(frozen=True)
class FailedRun:
    """What the reconciler read from a finished Job's pod (a failed one's, and a remediation Job's
    whatever the outcome): one line per failed task, and the playbook's set_stats facts."""

    summary: str
    tasks: tuple[tuple[str, str], ...] = ()  # (task name, stderr tail or message)
    facts: Mapping[str, str] = field(default_factory=dict)


class PassInputs(TypedDict, total=False):
    """What one pass reads besides the spec, the nodes and the Jobs (see `plan_driver`)."""

    node_pods: Mapping[str, Sequence[NodePod]]
    operand_pods: frozenset[tuple[str, str]]
    failed_runs: Mapping[str, FailedRun]
    now: Required[float]
    job_deadline_s: float
    validation_recipe: str | None
    validation_timeout_s: float
    allocatable_expected: bool
    job_image: str


class DriverPlanner:
    """One pass over the nodes with the driver enabled; `driveruninstall.DriverUninstaller`
    overrides the hooks marked "uninstall overrides" to take it off instead."""

    def __init__(
        self,
        driver: DriverConfig,
        jobs: Mapping[tuple[str, str], JobView],
        *,
        node_pods: Mapping[str, Sequence[NodePod]] | None = None,
        operand_pods: frozenset[tuple[str, str]] = frozenset(),
        failed_runs: Mapping[str, FailedRun] | None = None,
        now: float,
        job_deadline_s: float = 3600.0,
        validation_recipe: str | None = None,
        validation_timeout_s: float = 3600.0,
        allocatable_expected: bool = True,
        job_image: str = "",
    ) -> None:
        self.allocatable_expected = allocatable_expected
        self.job_image = job_image  # the image a Job created now runs (spec.driver.image or the operator's)
        self.validation_recipe = validation_recipe
        self.validation_timeout_s = validation_timeout_s
        self.driver = driver
        self.policy = driver.upgrade_policy
        self.jobs = jobs
        self.node_pods = node_pods or {}
        self.operand_pods = operand_pods
        self.failed_runs = failed_runs or {}
        self.now = now
        self.job_deadline_s = job_deadline_s
        self.plan = DriverPlan()
        self._patches: dict[str, NodePatch] = {}  # by node, in the order first written
        self._pull_notes: dict[str, str] = {}  # node -> its Job's unpullable image, with the reason

    def finish(self, started: Sequence[str]) -> DriverPlan:
        """The plan, with the started nodes' patches apart (see `DriverPlan.start_patches`)."""
        for name, patch in self._patches.items():
            (self.plan.start_patches if name in started else self.plan.patches).append(patch)
        return self.plan

    def after(self, node: NodeInfo) -> NodeInfo:
        """`node` as this pass's patch leaves it, so a following step reads what it will be."""
        patch = self._patches.get(node.name)
        if patch is None:
            return node
        labels = {**node.labels, **patch.labels}
        annotations = {**node.annotations, **patch.annotations}
        return replace(
            node,
            labels={k: v for k, v in labels.items() if v is not None},
            annotations={k: v for k, v in annotations.items() if v is not None},
            unschedulable=node.unschedulable if patch.unschedulable is None else patch.unschedulable,
        )

    # ---------------------------------------------------------------- helpers
    def _patch(
        self,
        node: NodeInfo,
        state: UpgradeState | None,
        *,
        labels: Mapping[str, str | None] | None = None,
        annotations: Mapping[str, str | None] | None = None,
        unschedulable: bool | None = None,
        event: tuple[str, str, bool] | None = None,
    ) -> None:
        all_labels: dict[str, str | None] = {STATE_LABEL: state.value if state else None}
        all_labels.update(labels or {})
        all_annotations: dict[str, str | None] = {SINCE: str(int(self.now))}
        all_annotations.update(annotations or {})
        label_diff = {k: v for k, v in all_labels.items() if node.labels.get(k) != v}
        annotation_diff = {k: v for k, v in all_annotations.items() if node.annotations.get(k) != v}
        if unschedulable is not None and unschedulable == node.unschedulable:
            unschedulable = None
        if label_diff or annotation_diff or unschedulable is not None:
            earlier = self._patches.get(node.name)
            if earlier is not None:  # a second step in the same pass: one patch, later values win
                label_diff = {**earlier.labels, **label_diff}
                annotation_diff = {**earlier.annotations, **annotation_diff}
                if unschedulable is None:
                    unschedulable = earlier.unschedulable
            self._patches[node.name] = NodePatch(node.name, label_diff, annotation_diff, unschedulable)
        if event is not None:
            self.plan.events.append(NodeEvent(node.name, event[0], event[1], event[2]))

    def want(self, node: NodeInfo) -> str:
        """The concrete version for this node: an empty spec version is the vendor's default."""
        return resolved_version(self.driver, _vendor(node) or "")

    def _state(self, node: NodeInfo, state: str, message: str = "") -> None:
        """The node's state for `status.driver`, with its version as this pass's patch leaves it."""
        version = self.after(node).labels.get(VERSION_LABEL, "")
        message = self._pull_notes.get(node.name) or message  # the one thing a person must fix
        self.plan.states[node.name] = DriverNodeState(state, version, message, self.want(node))

    def _job(self, node: NodeInfo, operation: Operation, vendor: str) -> JobView | None:
        """The node's Job for `operation` and the wanted version (uninstalling: the installed one);
        asks for it when missing."""
        job = self.jobs.get((node.name, operation))
        if job is not None and job.deleting:
            return None  # the old one is going; create the new one after
        if job is not None and superseded(job, self.job_image):
            self.plan.delete_jobs.append(job)
            return None
        if job is not None and job.pulling:
            self._report_pull(node, job)
        if job is not None and operation == "driver-install" and job.version != self.want(node):
            self.plan.delete_jobs.append(job)
            return None
        if job is None:
            version = (
                node.labels.get(VERSION_LABEL, "") if operation == "driver-uninstall" else self.want(node)
            )
            self.plan.create_jobs.append(JobRequest(node.name, operation, vendor, version))
        return job

    def _report_pull(self, node: NodeInfo, job: JobView) -> None:
        """The Job's pod cannot pull its image: it stays Pending and the Job active (a kubelet never
        fails it) until activeDeadlineSeconds, so say so now: the node's state message, the
        DeviceConfig's Degraded condition and, once per Job, a Warning Event on the Node."""
        problem = job.pull_problem(image_field(self.driver.image))
        self._pull_notes[node.name] = problem
        self.plan.pull_problems[node.name] = job.pull_problem(image_field(self.driver.image), detail=False)
        if node.annotations.get(PULL_REPORTED) == job.uid:
            return
        now = self.after(node)
        self._patch(
            now,
            parse_state(now.labels.get(STATE_LABEL)),
            annotations={PULL_REPORTED: job.uid, SINCE: now.annotations.get(SINCE)},
            event=(PULL_EVENT, problem[:1000], True),
        )

    def _drop_jobs(self, node: NodeInfo) -> None:
        for operation in ("driver-install", "node-reboot", "driver-uninstall"):
            job = self.jobs.get((node.name, operation))
            if job is not None and not job.deleting:
                self.plan.delete_jobs.append(job)

    def _fail(self, node: NodeInfo, why: str, job: JobView | None = None) -> None:
        """The node stops in `upgrade-failed` (`uninstall-failed` uninstalling) until a person acts."""
        run = self.failed_runs.get(job.uid) if job is not None else None
        message = f"{why}: {run.summary}" if run and run.summary else why
        reported = node.annotations.get(REPORTED)
        annotations: dict[str, str | None] = {FAILURE: message[:1000]}
        if job is not None:
            annotations[REPORTED] = job.uid
        reason, state = self._failure(install=not node.labels.get(VERSION_LABEL))
        if job is None or reported != job.uid:
            for task, detail in run.tasks if run else ():
                self.plan.events.append(
                    NodeEvent(node.name, reason, f"task {task!r} failed: {detail}"[:1000], True)
                )
        self._patch(node, state, annotations=annotations, event=(reason, message[:1000], True))
        self._state(node, state.value, message)

    def _switch(
        self, node: NodeInfo, vendor: str, running: Operation, state: UpgradeState, operation: Operation
    ) -> None:
        """The mode flipped mid-Job: let the `running` Job end (a half-removed package or a
        half-built module is worse than either), then go to `state` with the other Job."""
        job = self.jobs.get((node.name, running))
        # A Job stuck pulling its image never started: nothing half-done to wait for.
        if job is not None and job.phase == "running" and not job.deleting and not job.pulling:
            self._state(node, node.labels.get(STATE_LABEL, ""), f"letting the {running} Job finish first")
            return
        if job is not None and not job.deleting:
            self.plan.delete_jobs.append(job)
        self._patch(node, state)
        self._job(node, operation, vendor)
        self._state(node, state.value)

    def relabel_legacy(self, node: NodeInfo, vendor: str) -> NodeInfo:
        """`default` (older operators' label for an empty version) becomes the vendor's default
        version, the one the playbook installed: no Job, the node keeps its step. Any other node
        is returned as it is."""
        label = node.labels.get(VERSION_LABEL, "")
        concrete = concrete_label(label, vendor)
        if concrete == label:
            return node  # not the legacy value, or no default known for this vendor
        self._patch(
            node,
            parse_state(node.labels.get(STATE_LABEL)),
            labels={VERSION_LABEL: concrete},
            annotations={SINCE: node.annotations.get(SINCE)},
        )
        return self.after(node)

    # ---------------------------------------------------------------- uninstall overrides
    def node_pass(self, node: NodeInfo, state: UpgradeState | None, vendor: str) -> None:
        """One node's step, unless the bounds start it (see `plan_driver`)."""
        version = node.labels.get(VERSION_LABEL)
        if state is UpgradeState.UNINSTALL_REQUIRED:  # enabled again before it started: nothing to undo
            self._patch(node, None, annotations={SINCE: None})
            self._state(node, "installed" if version else "installing")
        elif state is None and not version:
            self.install(node, vendor)
        elif state in (None, UpgradeState.DONE) and version != self.want(node):
            if self.policy.enable:
                self._patch(node, UpgradeState.REQUIRED, annotations={SINCE: None})
                self._state(node, UpgradeState.REQUIRED.value)
            else:
                self._state(node, "version-drift", f"{version} installed; automatic upgrades are disabled")
        elif state in (None, UpgradeState.DONE):
            self._state(node, "installed" if state is None else UpgradeState.DONE.value)
        elif state is UpgradeState.REQUIRED:
            self.waiting(node, state)
        elif state in FAILED_STATES:
            self._state(node, state.value, node.annotations.get(FAILURE, ""))
        else:
            self.walk(node, state, vendor)

    def waiting(self, node: NodeInfo, state: UpgradeState) -> None:
        wait = "the node's remediation to finish" if _remediating(node) else "an upgrade slot"
        self._state(node, state.value, f"waiting for {wait}")

    def _failure(self, *, install: bool) -> tuple[str, UpgradeState]:
        """The Event reason and the state a failed step leaves the node in."""
        return ("DriverInstallFailed" if install else "DriverUpgradeFailed"), UpgradeState.FAILED

    def _start_event(self, node: NodeInfo) -> tuple[str, str]:
        return "DriverUpgradeStarted", f"upgrading the driver to {self.want(node)}: node cordoned"

    def _begin_job(self, node: NodeInfo, vendor: str) -> None:
        """Drained and paused: the walk's Job, in the same pass (the build is the long step)."""
        self._patch(node, UpgradeState.UPGRADING)
        self._job(node, "driver-install", vendor)
        self._state(node, UpgradeState.UPGRADING.value)

    def _uninstalling(self, node: NodeInfo, vendor: str) -> None:
        """Enabled again mid-uninstall: the uninstall Job ends, then the install runs."""
        self._switch(node, vendor, "driver-uninstall", UpgradeState.UPGRADING, "driver-install")

    # ---------------------------------------------------------------- per node
    def install(self, node: NodeInfo, vendor: str) -> None:
        job = self._job(node, "driver-install", vendor)
        if job is None or job.phase == "running":
            self._state(node, "installing")
            return
        if job.phase == "failed":
            if job.uid not in self.failed_runs:
                self._state(node, "installing")  # its pod's report is read before the next pass
                return
            self._fail(node, f"driver install Job {job.name} failed ({job.reason or 'Failed'})", job)
            return
        self._patch(
            node,
            None,
            labels={VERSION_LABEL: self.want(node)},
            annotations={FAILURE: None, SINCE: None, PULL_REPORTED: None},
            event=("DriverInstalled", f"driver {self.want(node)} installed by Job {job.name}", False),
        )
        self._state(node, "installed")

    def step(self, node: NodeInfo, state: UpgradeState, vendor: str) -> None:
        """One step of a node already in the upgrade walk (started by the planner)."""
        if state is UpgradeState.CORDONED:
            self._drop_jobs(node)  # a new walk never reuses an old run's Job
            self._patch(node, UpgradeState.DRAINING)
            self._state(node, UpgradeState.DRAINING.value)
        elif state is UpgradeState.DRAINING:
            self._drain(node)
        elif state is UpgradeState.POD_RESTART:
            self._pause(node, vendor)
        elif state is UpgradeState.UPGRADING:
            self._upgrade(node, vendor)
        elif state is UpgradeState.REBOOTING:
            self._reboot(node, vendor)
        elif state is UpgradeState.VALIDATING:
            self._validate(node)
        elif state is UpgradeState.UNINSTALLING:
            self._uninstalling(node, vendor)
        else:
            raise ValueError(f"{state} is not a step in flight")

    def walk(self, node: NodeInfo, state: UpgradeState, vendor: str) -> None:
        """`step`, then each following step that can begin in this same pass, in the same patch:
        cordon -> drain -> pause is one write, not three passes. A step that waits on something
        outside this pass (pods to go, a Job, a reboot, the GPUs back) ends the walk; so does
        draining a node whose pods this pass did not list (the reconciler lists them next pass)."""
        while True:
            self.step(node, state, vendor)
            node_after = self.after(node)
            following = parse_state(node_after.labels.get(STATE_LABEL))
            if following is state or following not in _CHAINED:
                return
            if following is UpgradeState.DRAINING and node.name not in self.node_pods:
                return
            node, state = node_after, following

    def start(self, node: NodeInfo) -> None:
        """upgrade-required -> cordoned: remember an admin's cordon, then cordon."""
        self._patch(
            node,
            UpgradeState.CORDONED,
            annotations={
                ADMIN_CORDON: "true" if node.unschedulable else None,
                STARTED: str(int(self.now)),
                FAILURE: None,
                REPORTED: None,
                PULL_REPORTED: None,
            },
            unschedulable=True,
            event=(*self._start_event(node), False),
        )
        self._state(node, UpgradeState.CORDONED.value)

    def _drain(self, node: NodeInfo) -> None:
        policy = self.policy
        drain_set = "node_drain_policy" in policy.model_fields_set
        gpu_only = not drain_set and "pod_deletion_policy" in policy.model_fields_set
        chosen = policy.pod_deletion_policy if gpu_only else policy.node_drain_policy
        drain = policy.node_drain_policy
        step = plan_drain(
            self.node_pods.get(node.name, ()),
            gpu_pods_only=gpu_only,
            force=chosen.force,
            ignore_daemon_sets=drain.ignore_daemon_sets,
            ignore_namespaces=drain.ignore_namespaces if not gpu_only else (),
        )
        if step.refused:
            names = ", ".join(p.key for p in step.refused)
            self._fail(node, f"drain refused: {names} not managed by a controller (set force to delete it)")
            return
        if step.done:
            self._patch(node, UpgradeState.POD_RESTART)
            self._state(node, UpgradeState.POD_RESTART.value)
            return
        elapsed = self.now - _since(node)
        if chosen.timeout_seconds and elapsed >= chosen.timeout_seconds:
            names = ", ".join(p.key for p in (*step.remove, *step.waiting)[:10])
            self._fail(node, f"drain timed out after {chosen.timeout_seconds}s; still on the node: {names}")
            return
        (self.plan.delete_pods if gpu_only else self.plan.evict).extend(step.remove)
        self.plan.wake(RETRY_S)
        self._state(node, UpgradeState.DRAINING.value, f"{len(step.remove) + len(step.waiting)} pod(s) to go")

    def _pause(self, node: NodeInfo, vendor: str) -> None:
        labels, annotations = PAUSE.pause(node.labels, node.annotations, OPERANDS)
        if labels or annotations:
            self._patch(
                node,
                UpgradeState.POD_RESTART,
                labels=labels,
                annotations={**annotations, SINCE: node.annotations.get(SINCE)},
            )
            self._state(node, UpgradeState.POD_RESTART.value, "pausing the GPU operands")
            return
        left = PAUSE.left(node.annotations, (s for n, s in self.operand_pods if n == node.name))
        if left:
            self._state(node, UpgradeState.POD_RESTART.value, f"waiting for {', '.join(left)} to stop")
            return
        self._begin_job(node, vendor)

    def _upgrade(self, node: NodeInfo, vendor: str) -> None:
        job = self._job(node, "driver-install", vendor)
        if job is None or job.phase == "running":
            self._state(node, UpgradeState.UPGRADING.value, f"driver {self.want(node)} installing")
            return
        if job.phase == "failed":
            if job.uid not in self.failed_runs:
                self._state(node, UpgradeState.UPGRADING.value)  # its pod's report is read first
                return
            self._fail(node, f"driver upgrade Job {job.name} failed ({job.reason or 'Failed'})", job)
            return
        if self.policy.reboot_required:
            self._patch(
                node,
                UpgradeState.REBOOTING,
                labels={VERSION_LABEL: self.want(node)},
                annotations={BOOT_ID: node.boot_id},
            )
            self._state(node, UpgradeState.REBOOTING.value)
        else:
            self._resume(node, labels={VERSION_LABEL: self.want(node)})

    def _reboot(self, node: NodeInfo, vendor: str) -> None:
        before = node.annotations.get(BOOT_ID, "")
        if node.boot_id and node.boot_id != before and node.ready:
            job = self.jobs.get((node.name, "node-reboot"))
            if job is not None and not job.deleting:
                self.plan.delete_jobs.append(job)
            self._resume(node)
            return
        if self.now - _since(node) >= self.job_deadline_s:
            self._fail(node, f"node did not come back with a new bootID within {int(self.job_deadline_s)}s")
            return
        self._job(node, "node-reboot", vendor)
        self.plan.wake(max(1.0, self.job_deadline_s - (self.now - _since(node))))
        self._state(node, UpgradeState.REBOOTING.value, "waiting for a new bootID and Ready")

    def _resume(self, node: NodeInfo, labels: Mapping[str, str | None] | None = None) -> None:
        """Operands back (the ones this upgrade paused), then validate."""
        self._patch(
            node,
            UpgradeState.VALIDATING,
            labels={**self.resumed(node), **(labels or {})},
            annotations={PAUSED: None},
        )
        self._state(node, UpgradeState.VALIDATING.value)

    @staticmethod
    def resumed(node: NodeInfo) -> dict[str, str | None]:
        """The deploy labels this walk paused, set back to "true" (not one someone else paused)."""
        return PAUSE.resumed(node.labels, node.annotations)

    def _validate(self, node: NodeInfo) -> None:
        budget = VALIDATE_TIMEOUT_S + (self.validation_timeout_s if self.validation_recipe else 0.0)
        # Without a device plugin nobody puts GPUs in allocatable (the DRA driver publishes
        # ResourceSlices): then the Job's own device-node check and a Ready node are the proof.
        gpus_back = node.gpus_allocatable > 0 or not self.allocatable_expected
        want = self.want(node)
        if node.ready and gpus_back and self._recipe_passed(node):
            self._patch(
                node,
                UpgradeState.DONE,
                annotations=dict.fromkeys(STEP_ANNOTATIONS, None),
                unschedulable=False if node.annotations.get(ADMIN_CORDON) != "true" else None,
                event=("DriverUpgraded", f"driver {want} running; GPUs back in allocatable", False),
            )
            started = node.annotations.get(STARTED, "")
            if started.isdigit():
                self.plan.finished.append((node.name, max(0.0, self.now - int(started))))
            self._state(node, UpgradeState.DONE.value)
            return
        if node.name in self.plan.states:  # the recipe's answer failed the node just now
            return
        if not node.ready:
            waiting = "the node to be Ready"
        elif not gpus_back:
            waiting = "the GPUs in allocatable"
        else:
            waiting = f"an answer to recipe {self.validation_recipe}"
        if self.now - _since(node) >= budget:
            self._fail(node, f"validation timed out after {int(budget)}s waiting for {waiting}")
            return
        self.plan.wake(budget - (self.now - _since(node)))
        self._state(node, UpgradeState.VALIDATING.value, f"waiting for {waiting}")

    def _recipe_passed(self, node: NodeInfo) -> bool:
        """With a validation recipe: ask the node's test runner once, True when it answered Passed
        (a failed answer fails the node). The request id names this walk, so an older answer (or an
        automatic run's) never counts."""
        if not self.validation_recipe:
            return True
        answer = ask_recipe(
            node, self.validation_recipe, f"driver-upgrade-{node.annotations.get(SINCE, '0')}"
        )
        if answer.result == "failed":
            self._fail(node, f"validation recipe {self.validation_recipe} {answer.detail}")
        elif answer.request is not None:
            self._patch(
                node,
                UpgradeState.VALIDATING,
                annotations={TEST_REQUEST: answer.request, SINCE: node.annotations.get(SINCE)},
            )
        return answer.result == "passed"


@dataclass(frozen=True)
class RecipeAnswer:
    result: Literal["passed", "failed", "pending"]
    detail: str = ""  # why it failed: the result and the runner's reason
    request: str | None = None  # the TEST_REQUEST value to write (None: already asked)


def ask_recipe(node: NodeInfo, recipe: str, request_id: str) -> RecipeAnswer:
    """The test runner's answer to `recipe` for `request_id` (docs/test-runner.md, operator API), or
    the request to write when it has not been asked yet. Shared by driver upgrades and remediation."""
    answer = _answer(node.annotations.get(TEST_RESULT, ""))
    if answer.get("requestId") == request_id:
        if answer.get("result") == "Passed":
            return RecipeAnswer("passed")
        detail = answer.get("result", "failed") + (f": {answer['reason']}" if answer.get("reason") else "")
        return RecipeAnswer("failed", detail)
    wanted = f"{recipe}:{request_id}"
    return RecipeAnswer("pending", request=None if node.annotations.get(TEST_REQUEST) == wanted else wanted)


def _answer(text: str) -> dict[str, str]:
    try:
        value = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def _remediating(node: NodeInfo) -> bool:
    return node.labels.get(REMEDIATION_STATE_LABEL) in REMEDIATION_ACTIVE


def _view(node: NodeInfo) -> NodeView:
    """A node in remediation is unavailable capacity and never starts an upgrade (nor the reverse:
    remediation waits while a node is in flight here)."""
    state = parse_state(node.labels.get(STATE_LABEL))
    remediating = _remediating(node)
    startable = None if remediating and state in WAITING else state
    return NodeView(node.name, startable, node.ready, node.unschedulable or remediating)


def run_pass(planner: DriverPlanner, nodes: Sequence[NodeInfo]) -> DriverPlan:
    """Each node's step by `planner`, then the starts the bounds allow (shared by `plan_driver`
    and `driveruninstall.plan_uninstall`)."""
    vendors: dict[str, str] = {}
    for node in sorted(nodes, key=lambda n: n.name):
        vendor = _vendor(node)
        raw = node.labels.get(STATE_LABEL)
        state = parse_state(raw)
        if raw and state is None:
            planner._state(
                node,
                "invalid-state",
                f"label {STATE_LABEL}={raw!r} is not a state: set upgrade-required or remove it",
            )
            continue
        if vendor is None:
            planner._state(node, "unknown-vendor", "the node has no single GPU vendor label (NFD PCI labels)")
            continue
        vendors[node.name] = vendor
        planner.node_pass(planner.relabel_legacy(node, vendor), state, vendor)
    # The bounds are checked on the nodes as this pass leaves them: a node that finished just now
    # frees its slot for the next one in the same pass (its patch is sent before any start's).
    after = {node.name: planner.after(node) for node in nodes}
    views = [_view(n) for n in sorted(after.values(), key=lambda n: n.name)]
    started = plan_upgrades(views, planner.policy).start
    for name in started:
        planner.start(after[name])
        planner.walk(planner.after(after[name]), UpgradeState.CORDONED, vendors[name])
    return planner.finish(started)


def plan_driver(
    driver: DriverConfig,
    nodes: Sequence[NodeInfo],
    jobs: Mapping[tuple[str, str], JobView],
    **inputs: Unpack[PassInputs],
) -> DriverPlan:
    """One pass of the driver lifecycle over the nodes a DeviceConfig selects (`driver.enable`).

    `jobs` maps (node, operation) to its Job; `node_pods` the pods of nodes being drained;
    `operand_pods` (node, service) of the operand pods still present; `failed_runs` what the pods of
    failed Jobs reported, by Job uid (a failed Job not in it waits: the reconciler reads its pod);
    `validation_recipe`: the test runner's recipe a node must pass before `upgrade-done` (None:
    the GPUs back in allocatable are enough); `allocatable_expected` False when no device plugin
    advertises the GPUs (validation then needs only a Ready node and the recipe)."""
    return run_pass(DriverPlanner(driver, jobs, **inputs), nodes)
