"""Rollout planning: which labels each node should carry next, as pure functions.

`plan_rollout` looks at one valid DeviceConfig, every node and the operand pods, and returns the
node patches that move each node one step along its lifecycle (architecture.md sections 4-5):
deploy labels are added stage by stage, a stage only once the previous one's pods are Ready on that
node; disabled operands lose their label; nodes that left the selector (or every node, when the
DeviceConfig is being deleted) are emptied in reverse stage order. Calling it again on the state it
produced plans nothing: the reconciler is level-triggered and idempotent.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuop_common.config import DeviceConfigSpec
from gpuop_common.kube import label_changes

from gpuop_operator.model import (
    COMPANION_PODS,
    DISCOVERED,
    DRIVER_FAILED,
    DRIVER_IMAGE_UNPULLABLE,
    DRIVER_INSTALLING,
    DRIVER_UNINSTALLING,
    DRIVER_UPGRADING,
    JOB_SERVICES,
    OPERANDS_ROLLING,
    OWNER_ANNOTATION,
    PAUSED_PREFIX,
    READY,
    REMOVING,
    STAGE_ANNOTATION,
    STAGES,
    NodeInfo,
    NodePatch,
    PodInfo,
    deploy_label,
)
from gpuop_operator.selector import matches
from gpuop_operator.upgrade import FAILED_STATES, IN_FLIGHT, STATE_LABEL, parse_state


@dataclass(frozen=True)
class PodIndex:
    """Operand pods by (node, service); built once per reconcile from the pod cache."""

    ready: frozenset[tuple[str, str]]
    present: frozenset[tuple[str, str]]  # pods not (yet) being deleted
    # Every pod object still there, terminating ones too: its processes may hold the GPU open
    # until the kubelet has removed it (a reset or a driver swap waits for these to be gone).
    on_node: frozenset[tuple[str, str]] = frozenset()

    @classmethod
    def of(cls, pods: Iterable[PodInfo]) -> PodIndex:
        ready, present, on_node = set(), set(), set()
        for pod in pods:
            on_node.add((pod.node, COMPANION_PODS.get(pod.service, pod.service)))
            if pod.terminating:
                # Its DaemonSet is already taking it down; teardown of earlier stages may go on.
                continue
            present.add((pod.node, COMPANION_PODS.get(pod.service, pod.service)))
            if pod.ready:
                ready.add((pod.node, pod.service))
        return cls(frozenset(ready), frozenset(present), frozenset(on_node))


@dataclass(frozen=True)
class NodePlan:
    node: str
    stage: str
    patch: NodePatch | None


@dataclass(frozen=True)
class RolloutPlan:
    nodes: tuple[NodePlan, ...] = ()
    # Operand (service) -> (nodes that should run it, nodes where its pod is Ready).
    operands: Mapping[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def steps(self) -> list[NodePatch]:
        return [plan.patch for plan in self.nodes if plan.patch is not None]

    @property
    def stages(self) -> dict[str, str]:
        """Lifecycle stage of every node this DeviceConfig selects or still holds."""
        return {plan.node: plan.stage for plan in self.nodes}


def enabled_stages(spec: DeviceConfigSpec) -> list[tuple[str, ...]]:
    """The rollout stages with only the operands this spec enables (empty stages dropped)."""
    result = []
    for stage in STAGES:
        enabled = tuple(service for service in stage if getattr(spec.section(service), "enable", False))
        if enabled:
            result.append(enabled)
    return result


def _with_changes(
    node: NodeInfo, labels: Mapping[str, str | None], annotations: Mapping[str, str | None]
) -> NodePatch | None:
    label_diff = label_changes(node.labels, labels)
    annotation_diff = label_changes(node.annotations, annotations)
    if not label_diff and not annotation_diff:
        return None
    return NodePatch(node.name, label_diff, annotation_diff)


def _advance(
    node: NodeInfo,
    owner: str,
    stages: Sequence[tuple[str, ...]],
    pods: PodIndex,
    awaited: Collection[str],
    *,
    driver_ready: Collection[str],
    driver_walk: str | None,
    unpullable: Collection[str] = (),
) -> NodePlan:
    """Next step for a selected node: add deploy labels up to the first stage not Ready yet.

    The driver stage has no DaemonSet: it is done when `driver_ready` names the node (its playbook
    Job installed the driver, driverflow). `driver_walk`: the stage a node in a driver walk shows
    (`driver-upgrading`, `driver-uninstalling`), None when no walk runs."""
    enabled = {service for stage in stages for service in stage}
    desired: dict[str, str | None] = {
        deploy_label(service): None
        for stage in STAGES
        for service in stage
        if service not in enabled and service not in JOB_SERVICES
    }
    lifecycle = READY
    for stage in stages:
        for service in stage:
            if service in JOB_SERVICES:
                continue
            if not node.labels.get(deploy_label(service), "").startswith(PAUSED_PREFIX):
                desired[deploy_label(service)] = "true"
        done = all(
            node.name in driver_ready if service in JOB_SERVICES else (node.name, service) in pods.ready
            for service in stage
            if service in awaited or service in JOB_SERVICES
        )
        if not done:
            lifecycle = DRIVER_INSTALLING if "driver" in stage else OPERANDS_ROLLING
            break
    lifecycle = walk_stage(node, driver_walk) or lifecycle
    if node.name in unpullable and lifecycle in (DRIVER_INSTALLING, DRIVER_UPGRADING, DRIVER_UNINSTALLING):
        lifecycle = DRIVER_IMAGE_UNPULLABLE
    annotations: dict[str, str | None] = {OWNER_ANNOTATION: owner, STAGE_ANNOTATION: lifecycle}
    return NodePlan(node.name, lifecycle, _with_changes(node, desired, annotations))


def _teardown(node: NodeInfo, pods: PodIndex) -> NodePlan:
    """Next step for a node leaving this DeviceConfig: drop the last stage first, wait for its pods."""
    for stage in reversed(STAGES):
        labelled = [
            service
            for service in stage
            if service not in JOB_SERVICES and deploy_label(service) in node.labels
        ]
        if labelled:
            removal: dict[str, str | None] = {deploy_label(service): None for service in labelled}
            return NodePlan(node.name, REMOVING, _with_changes(node, removal, {STAGE_ANNOTATION: REMOVING}))
        if any((node.name, service) in pods.present for service in stage):
            return NodePlan(node.name, REMOVING, None)  # this stage's pods are still going away
    done: dict[str, str | None] = {OWNER_ANNOTATION: None, STAGE_ANNOTATION: None}
    return NodePlan(node.name, REMOVING, _with_changes(node, {}, done))


def walk_stage(node: NodeInfo, driver_walk: str | None) -> str | None:
    """The node's stage while it is in the driver walk `driver_walk` names (None: no walk runs),
    or None when it is not in one."""
    state = parse_state(node.labels.get(STATE_LABEL))
    if driver_walk is None or state is None:
        return None
    if state in IN_FLIGHT:
        return driver_walk
    return DRIVER_FAILED if state in FAILED_STATES else None


def uninstall_stage_patches(owner: str, nodes: Iterable[NodeInfo]) -> list[NodePatch]:
    """While a deleted DeviceConfig's nodes walk the driver uninstall (before their teardown), the
    stage of those in the walk says so."""
    patches = []
    for node in nodes:
        stage = walk_stage(node, DRIVER_UNINSTALLING) if owned_by(node, owner) else None
        if stage is not None and node.annotations.get(STAGE_ANNOTATION) != stage:
            patches.append(NodePatch(node.name, {}, {STAGE_ANNOTATION: stage}))
    return patches


def _driver_walk(spec: DeviceConfigSpec | None) -> str | None:
    """The stage of a node in a driver walk: the upgrade while the driver is enabled, the
    uninstall (`uninstallPolicy: Uninstall`) once it is not; with `Keep` nothing walks."""
    if spec is None:
        return None
    if spec.driver.enable:
        return DRIVER_UPGRADING
    return DRIVER_UNINSTALLING if spec.driver.uninstall_policy == "Uninstall" else None


def owned_by(node: NodeInfo, owner: str) -> bool:
    return node.annotations.get(OWNER_ANNOTATION) == owner


def plan_rollout(
    owner: str,
    spec: DeviceConfigSpec | None,
    nodes: Iterable[NodeInfo],
    pods: Iterable[PodInfo] | PodIndex,
    *,
    installed: Collection[str] | None = None,
    driver_ready: Collection[str] = (),
    driver_unpullable: Collection[str] = (),
) -> RolloutPlan:
    """Plan one reconcile of DeviceConfig `owner` ("<namespace>/<name>").

    `spec` None means the DeviceConfig is being deleted: every node it holds is torn down.
    `installed` lists the operands that have a DaemonSet; readiness is only awaited for those, so a
    missing chart does not stall every node (the status reports it as Degraded instead). None means
    every operand is installed. `driver_ready`: nodes whose driver stage is done (driverflow);
    `driver_unpullable`: nodes whose driver Job cannot pull its image (stage `driver-image-unpullable`)."""
    index = pods if isinstance(pods, PodIndex) else PodIndex.of(pods)
    stages = enabled_stages(spec) if spec is not None else []
    walk = _driver_walk(spec)
    awaited = set(installed) if installed is not None else {s for stage in STAGES for s in stage}
    plans = []
    for node in sorted(nodes, key=lambda n: n.name):
        selected = spec is not None and matches(spec.selector, node.labels)
        holder = node.annotations.get(OWNER_ANNOTATION)
        if selected and holder in (None, owner):
            plans.append(
                _advance(
                    node,
                    owner,
                    stages,
                    index,
                    awaited,
                    driver_ready=driver_ready,
                    driver_walk=walk,
                    unpullable=driver_unpullable,
                )
            )
        elif holder == owner:
            plans.append(_teardown(node, index))
        elif selected and holder is not None:
            # Held by another DeviceConfig that is releasing it: wait until it has.
            plans.append(NodePlan(node.name, DISCOVERED, None))
    return RolloutPlan(tuple(plans), _operand_counts(plans, stages, index, driver_ready))


def _operand_counts(
    plans: Sequence[NodePlan],
    stages: Sequence[tuple[str, ...]],
    pods: PodIndex,
    driver_ready: Collection[str],
) -> dict[str, tuple[int, int]]:
    selected = [plan.node for plan in plans if plan.stage != REMOVING]
    counts = {}
    for stage in stages:
        for service in stage:
            if service in JOB_SERVICES:
                ready = sum(1 for node in selected if node in driver_ready)
            else:
                ready = sum(1 for node in selected if (node, service) in pods.ready)
            counts[service] = (len(selected), ready)
    return counts
