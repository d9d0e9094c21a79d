"""Rollout planning over many node/spec combinations: stage order, readiness gating, teardown, idempotence."""

from __future__ import annotations

import itertools
from collections.abc import Iterable

import pytest
from gpuop_common.config import DeviceConfigSpec
from gpuop_operator.model import (
    AMD_PRESENT,
    NVIDIA_PRESENT,
    OPERANDS_ROLLING,
    OWNER_ANNOTATION,
    READY,
    REMOVING,
    STAGE_ANNOTATION,
    NodeInfo,
    NodePatch,
    PodInfo,
    deploy_label,
)
from gpuop_operator.plan import enabled_stages, plan_rollout, uninstall_stage_patches

OWNER = "gpu-operator/default"
DP, NL, ME = (deploy_label(s) for s in ("device-plugin", "node-labeller", "metrics-exporter"))


def amd(name: str, **labels: str) -> NodeInfo:
    return NodeInfo(name, {AMD_PRESENT: "true", **labels})


def apply(nodes: Iterable[NodeInfo], patches: Iterable[NodePatch]) -> list[NodeInfo]:
    """What the API server would hold after the merge patches."""
    by_name = {node.name: node for node in nodes}
    for patch in patches:
        node = by_name[patch.node]
        labels, annotations = dict(node.labels), dict(node.annotations)
        for target, changes in ((labels, patch.labels), (annotations, patch.annotations)):
            for key, value in changes.items():
                if value is None:
                    target.pop(key, None)
                else:
                    target[key] = value
        by_name[patch.node] = NodeInfo(node.name, labels, annotations)
    return list(by_name.values())


def ready_pods(nodes: Iterable[NodeInfo]) -> list[PodInfo]:
    """A DaemonSet controller + kubelet that makes every labelled operand Ready at once."""
    pods = []
    for node in nodes:
        for key in node.labels:
            if key.startswith("gpuop.dev/deploy."):
                pods.append(PodInfo(key.removeprefix("gpuop.dev/deploy."), node.name, ready=True))
    return pods


def converge(
    spec: DeviceConfigSpec | None, nodes: list[NodeInfo], rounds: int = 10
) -> tuple[list[NodeInfo], int]:
    steps = 0
    for _ in range(rounds):
        plan = plan_rollout(OWNER, spec, nodes, ready_pods(nodes))
        if not plan.steps:
            return nodes, steps
        steps += len(plan.steps)
        nodes = apply(nodes, plan.steps)
    raise AssertionError("did not converge")


def labels_of(node: NodeInfo) -> dict[str, str]:
    return {k: v for k, v in node.labels.items() if k.startswith("gpuop.dev/")}


def test_first_stage_is_labelled_and_nothing_more_until_its_pods_are_ready() -> None:
    plan = plan_rollout(OWNER, DeviceConfigSpec(), [amd("a")], [])
    (patch,) = plan.steps
    assert patch.labels == {DP: "true", NL: "true"}
    assert patch.annotations == {OWNER_ANNOTATION: OWNER, STAGE_ANNOTATION: OPERANDS_ROLLING}
    labelled = apply([amd("a")], plan.steps)
    # Only one of the two stage-2 pods is Ready: the exporter must wait.
    assert (
        plan_rollout(OWNER, DeviceConfigSpec(), labelled, [PodInfo("device-plugin", "a", True)]).steps == []
    )
    pods = [PodInfo("device-plugin", "a", True), PodInfo("node-labeller", "a", True)]
    (advance,) = plan_rollout(OWNER, DeviceConfigSpec(), labelled, pods).steps
    assert advance.labels == {ME: "true"}


def test_unready_or_terminating_pods_do_not_advance() -> None:
    labelled = apply([amd("a")], plan_rollout(OWNER, DeviceConfigSpec(), [amd("a")], []).steps)
    pods = [PodInfo("device-plugin", "a", False), PodInfo("node-labeller", "a", True, terminating=True)]
    assert plan_rollout(OWNER, DeviceConfigSpec(), labelled, pods).steps == []


def test_full_rollout_ends_ready_and_replanning_is_a_no_op() -> None:
    nodes, steps = converge(DeviceConfigSpec(), [amd(f"n{i}") for i in range(5)])
    assert steps == 3 * 5  # stage 2, stage 3, then the ready mark: a constant per node
    for node in nodes:
        assert labels_of(node) == {DP: "true", NL: "true", ME: "true"}
        assert node.annotations[STAGE_ANNOTATION] == READY
    plan = plan_rollout(OWNER, DeviceConfigSpec(), nodes, ready_pods(nodes))
    assert plan.steps == []
    assert set(plan.stages.values()) == {READY}
    assert plan.operands["metrics-exporter"] == (5, 5)


@pytest.mark.parametrize("reason", ["paused-for-config-change", "paused-for-driver-upgrade"])
def test_a_paused_operand_is_left_paused_until_its_pauser_restores_it(reason: str) -> None:
    nodes, _ = converge(DeviceConfigSpec(), [amd("a")])
    paused = apply(nodes, [NodePatch("a", {DP: reason}, {})])
    pods = [p for p in ready_pods(paused) if p.service != "device-plugin"]  # its pod went away
    (patch,) = plan_rollout(OWNER, DeviceConfigSpec(), paused, pods).steps
    assert patch.labels == {}  # the pause stands: no "true" written back, nothing else removed
    assert patch.annotations == {STAGE_ANNOTATION: OPERANDS_ROLLING}
    stalled = apply(paused, [patch])
    assert plan_rollout(OWNER, DeviceConfigSpec(), stalled, pods).steps == []
    restored = apply(stalled, [NodePatch("a", {DP: "true"}, {})])
    (back,) = plan_rollout(OWNER, DeviceConfigSpec(), restored, ready_pods(restored)).steps
    assert back.annotations == {STAGE_ANNOTATION: READY}
    # Disabling the section still removes the label, paused or not.
    spec = DeviceConfigSpec.model_validate({"devicePlugin": {"enable": False}, "draDriver": {"enable": True}})
    (off,) = plan_rollout(OWNER, spec, paused, pods).steps
    assert off.labels[DP] is None


def test_disabling_a_section_removes_only_its_label() -> None:
    nodes, _ = converge(DeviceConfigSpec(), [amd("a")])
    spec = DeviceConfigSpec.model_validate({"nodeLabeller": {"enable": False}})
    (patch,) = plan_rollout(OWNER, spec, nodes, ready_pods(nodes)).steps
    assert patch.labels == {NL: None}


def test_nodes_leaving_the_selector_are_emptied_last_stage_first() -> None:
    spec = DeviceConfigSpec.model_validate({"selector": {"matchLabels": {"pool": "gpu"}}})
    nodes, _ = converge(spec, [amd("a", pool="gpu")])
    moved = [NodeInfo("a", {**nodes[0].labels, "pool": "cpu"}, nodes[0].annotations)]
    pods = ready_pods(moved)
    (first,) = plan_rollout(OWNER, spec, moved, pods).steps
    assert first.labels == {ME: None}
    after = apply(moved, [first])
    # The exporter pod is still on the node: the earlier stage waits for it to go.
    assert plan_rollout(OWNER, spec, after, pods).steps == []
    (second,) = plan_rollout(OWNER, spec, after, ready_pods(after)).steps
    assert second.labels == {DP: None, NL: None}
    final, _ = converge(spec, apply(after, [second]))
    assert labels_of(final[0]) == {}
    assert OWNER_ANNOTATION not in final[0].annotations
    assert final[0].labels["pool"] == "cpu"


def test_deletion_tears_every_held_node_down() -> None:
    nodes, _ = converge(DeviceConfigSpec(), [amd("a"), amd("b")])
    plan = plan_rollout(OWNER, None, nodes, ready_pods(nodes))
    assert set(plan.stages.values()) == {REMOVING}
    final, _ = converge(None, nodes)
    assert all(labels_of(n) == {} and not n.annotations for n in final)


def test_the_mps_daemon_pod_counts_for_teardown_but_not_for_readiness() -> None:
    # Its DaemonSet (device-plugin chart, pods named device-plugin-mps) sits on the plugin's label.
    first = plan_rollout(OWNER, DeviceConfigSpec(), [amd("a")], []).steps
    labelled = apply([amd("a")], first)
    mps_only = [PodInfo("device-plugin-mps", "a", True), PodInfo("node-labeller", "a", True)]
    assert plan_rollout(OWNER, DeviceConfigSpec(), labelled, mps_only).steps == []
    nodes, _ = converge(DeviceConfigSpec(), [amd("a")])
    (first_down,) = plan_rollout(OWNER, None, nodes, ready_pods(nodes)).steps
    emptied = apply(nodes, [first_down])
    # Stage two's labels may go only once the exporter is gone; the stage-one MPS pod then holds the
    # node until it is gone as well.
    (stage_two,) = plan_rollout(OWNER, None, emptied, []).steps
    assert stage_two.labels == {DP: None, NL: None}
    held = apply(emptied, [stage_two])
    assert plan_rollout(OWNER, None, held, [PodInfo("device-plugin-mps", "a", False)]).steps == []
    (done,) = plan_rollout(OWNER, None, held, []).steps
    assert done.annotations == {OWNER_ANNOTATION: None, STAGE_ANNOTATION: None}


def test_nodes_held_by_another_deviceconfig_are_left_alone() -> None:
    other = NodeInfo("a", {AMD_PRESENT: "true", DP: "true"}, {OWNER_ANNOTATION: "ns/other"})
    plan = plan_rollout(OWNER, DeviceConfigSpec(), [other], [])
    assert plan.steps == []
    assert plan_rollout(OWNER, None, [other], []).stages == {}


def test_operand_without_a_daemonset_is_not_awaited() -> None:
    fresh = apply([amd("b")], plan_rollout(OWNER, DeviceConfigSpec(), [amd("b")], []).steps)
    plan = plan_rollout(
        OWNER, DeviceConfigSpec(), fresh, [PodInfo("device-plugin", "b", True)], installed={"device-plugin"}
    )
    assert plan.steps[0].labels == {ME: "true"}


SECTION_FLAGS = ("devicePlugin", "nodeLabeller", "metricsExporter")


@pytest.mark.parametrize("flags", list(itertools.product([True, False], repeat=3)))
@pytest.mark.parametrize("count", [0, 1, 7])
def test_every_enable_combination_converges_to_exactly_the_enabled_labels(
    flags: tuple[bool, bool, bool], count: int
) -> None:
    spec = DeviceConfigSpec.model_validate(
        {key: {"enable": on} for key, on in zip(SECTION_FLAGS, flags, strict=True)}
    )
    mixed = [amd(f"a{i}") if i % 2 else NodeInfo(f"n{i}", {NVIDIA_PRESENT: "true"}) for i in range(count)]
    nodes, steps = converge(spec, mixed)
    wanted = {label: "true" for label, on in zip((DP, NL, ME), flags, strict=True) if on}
    assert all(labels_of(node) == wanted for node in nodes)
    assert steps <= 3 * count
    assert len(enabled_stages(spec)) == (flags[0] or flags[1]) + flags[2]


def test_stage_order_is_never_violated_during_a_rollout() -> None:
    # Pods become Ready one service at a time; at no point may the exporter be labelled before both
    # stage-2 operands are Ready on that node.
    nodes = [amd("a"), amd("b")]
    ready: set[tuple[str, str]] = set()
    for _ in range(12):
        pods = [
            PodInfo(s, n, (n, s) in ready)
            for n, s in (
                (n.name, k.removeprefix("gpuop.dev/deploy."))
                for n in nodes
                for k in n.labels
                if k.startswith("gpuop.dev/deploy.")
            )
        ]
        patches = plan_rollout(OWNER, DeviceConfigSpec(), nodes, pods).steps
        for patch in patches:
            if patch.labels.get(ME) == "true":
                assert {(patch.node, "device-plugin"), (patch.node, "node-labeller")} <= ready
        nodes = apply(nodes, patches)
        # One more pod turns Ready per round.
        pending = sorted((p.node, p.service) for p in pods if not p.ready)
        if pending:
            ready.add(pending[0])
    assert all(n.annotations.get(STAGE_ANNOTATION) == READY for n in nodes)


@pytest.mark.parametrize(
    ("driver", "walk_state", "stage"),
    [
        ({"enable": True}, "draining", "driver-upgrading"),
        ({"enable": True}, "upgrade-failed", "driver-failed"),
        ({"enable": False, "uninstallPolicy": "Uninstall"}, "draining", "driver-uninstalling"),
        ({"enable": False, "uninstallPolicy": "Uninstall"}, "uninstalling", "driver-uninstalling"),
        ({"enable": False, "uninstallPolicy": "Uninstall"}, "uninstall-failed", "driver-failed"),
        ({"enable": False, "uninstallPolicy": "Keep"}, "draining", None),  # nothing walks with Keep
    ],
)
def test_a_node_in_a_driver_walk_shows_the_walk_as_its_stage(
    driver: dict[str, object], walk_state: str, stage: str | None
) -> None:
    """The stage annotation names the driver walk while the driver is enabled and, with
    `uninstallPolicy: Uninstall`, while it is taken off after `enable: false`."""
    spec = DeviceConfigSpec.model_validate({"driver": driver, "devicePlugin": {"enable": True}})
    node = amd("n0", **{DP: "true", "gpuop.dev/driver.version": "6.2"})
    node = NodeInfo(node.name, {**node.labels, "gpuop.dev/driver-upgrade-state": walk_state})
    plan = plan_rollout(OWNER, spec, [node], ready_pods([node]), driver_ready={"n0"})
    if stage is None:
        assert not plan.stages["n0"].startswith("driver-")
    else:
        assert plan.stages == {"n0": stage}


@pytest.mark.parametrize(
    ("driver", "walk_state", "version"),
    [
        ({"enable": True}, None, None),  # installing
        ({"enable": True}, "upgrading", "6.2"),
        ({"enable": False, "uninstallPolicy": "Uninstall"}, "uninstalling", "6.2"),
    ],
)
def test_a_node_whose_driver_job_cannot_pull_its_image_shows_it_as_its_stage(
    driver: dict[str, object], walk_state: str | None, version: str | None
) -> None:
    """The Job's pod stays Pending (a kubelet never fails it): the stage says why, not just
    "installing"; a failed walk keeps `driver-failed`."""
    spec = DeviceConfigSpec.model_validate({"driver": driver, "devicePlugin": {"enable": True}})
    labels = {AMD_PRESENT: "true"}
    if walk_state:
        labels["gpuop.dev/driver-upgrade-state"] = walk_state
    if version:
        labels["gpuop.dev/driver.version"] = version
    node = NodeInfo("n0", labels)
    plan = plan_rollout(OWNER, spec, [node], [], driver_unpullable={"n0"})
    assert plan.stages == {"n0": "driver-image-unpullable"}
    failed = NodeInfo("n0", {**labels, "gpuop.dev/driver-upgrade-state": "upgrade-failed"})
    if driver["enable"]:
        assert plan_rollout(OWNER, spec, [failed], [], driver_unpullable={"n0"}).stages == {
            "n0": "driver-failed"
        }


def test_a_deleted_deviceconfigs_nodes_in_the_uninstall_walk_show_it_before_their_teardown() -> None:
    held = {OWNER_ANNOTATION: OWNER, STAGE_ANNOTATION: READY}
    walking = NodeInfo("n0", {AMD_PRESENT: "true", "gpuop.dev/driver-upgrade-state": "draining"}, held)
    failed = NodeInfo("n1", {AMD_PRESENT: "true", "gpuop.dev/driver-upgrade-state": "uninstall-failed"}, held)
    done = NodeInfo("n2", {AMD_PRESENT: "true"}, held)
    other = NodeInfo("n3", walking.labels, {OWNER_ANNOTATION: "elsewhere/dc"})
    patches = uninstall_stage_patches(OWNER, [walking, failed, done, other])
    assert patches == [
        NodePatch("n0", {}, {STAGE_ANNOTATION: "driver-uninstalling"}),
        NodePatch("n1", {}, {STAGE_ANNOTATION: "driver-failed"}),
    ]
    again = apply([walking, failed, done, other], patches)
    assert uninstall_stage_patches(OWNER, again) == []
