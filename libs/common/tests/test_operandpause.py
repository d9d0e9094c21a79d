"""The one operand pause (driver upgrade, uninstall, remediation, config manager), called directly."""

from __future__ import annotations

from gpuop_common.operandpause import (
    CONFIG_CHANGE_PAUSE,
    DRIVER_UPGRADE_PAUSE,
    REMEDIATION_PAUSE,
    OperandPause,
    paused_operands,
)

PAUSE = CONFIG_CHANGE_PAUSE
ANN = PAUSE.annotation
DP, DRA, ME, TR = (
    f"gpuop.dev/deploy.{s}" for s in ("device-plugin", "dra-driver", "metrics-exporter", "test-runner")
)
ORDER = ["device-plugin", "dra-driver", "metrics-exporter", "test-runner"]


def _apply(meta: dict[str, str], patch: dict[str, str | None]) -> dict[str, str]:
    """A merge-patch as the API server applies it (None removes the key)."""
    return {k: v for k, v in {**meta, **patch}.items() if v is not None}


def test_pause_lists_what_it_paused_and_resume_sets_exactly_those_back():
    labels = {DP: "true", DRA: "false", ME: "true", "other": "x"}  # DRA off here, TR absent
    label_patch, ann_patch = PAUSE.pause(labels, {}, ORDER)
    assert label_patch == {DP: "paused-for-config-change", ME: "paused-for-config-change"}
    assert ann_patch == {ANN: f"{DP},{ME}"}
    labels, annotations = _apply(labels, label_patch), _apply({}, ann_patch)
    assert PAUSE.pause(labels, annotations, ORDER) == ({}, {})  # a second pass writes nothing
    assert PAUSE.left(annotations, ["device-plugin", "test-runner", "node-labeller"]) == ["device-plugin"]
    back, done = PAUSE.resume(labels, annotations)
    assert back == {DP: "true", ME: "true"} and done == {ANN: None}
    assert _apply(labels, back) == {DP: "true", DRA: "false", ME: "true", "other": "x"}


def test_a_label_someone_else_paused_or_changed_meanwhile_stays_theirs():
    labels = {DP: "true", ME: "true", TR: "true"}
    label_patch, ann_patch = PAUSE.pause(labels, {}, ORDER)
    labels, annotations = _apply(labels, label_patch), _apply({}, ann_patch)
    # Meanwhile remediation pauses the test runner (not ours) and an admin turns the exporter off.
    # Nothing of ours is `true`: remediation pauses nothing we hold.
    assert REMEDIATION_PAUSE.pause(labels, annotations, ORDER) == ({}, {})
    labels = {**labels, ME: "false", TR: REMEDIATION_PAUSE.value}
    back, done = PAUSE.resume(labels, annotations)
    assert back == {DP: "true"} and done == {ANN: None}
    assert REMEDIATION_PAUSE.resumed(labels, annotations) == {}  # its own annotation lists nothing


def test_two_walks_pause_the_same_node_and_each_resumes_only_its_own():
    labels = {DP: "true", ME: "false"}
    up_labels, up_ann = DRIVER_UPGRADE_PAUSE.pause(labels, {}, ORDER)
    labels, annotations = _apply(labels, up_labels), _apply({}, up_ann)
    labels = {**labels, ME: "true"}  # an admin turns the exporter on during the upgrade
    cfg_labels, cfg_ann = PAUSE.pause(labels, annotations, ORDER)
    assert cfg_labels == {ME: PAUSE.value} and cfg_ann == {ANN: ME}
    labels, annotations = _apply(labels, cfg_labels), _apply(annotations, cfg_ann)
    assert PAUSE.resumed(labels, annotations) == {ME: "true"}
    assert DRIVER_UPGRADE_PAUSE.resumed(labels, annotations) == {DP: "true"}


def test_an_interrupted_run_pauses_again_and_resumes_everything_the_first_run_paused():
    # The first run paused DP and ME and died; meanwhile the DRA driver was deployed.
    labels = {DP: PAUSE.value, ME: PAUSE.value, DRA: "true"}
    annotations = {ANN: f"{DP},{ME}"}
    label_patch, ann_patch = PAUSE.pause(labels, annotations, ORDER)
    assert label_patch == {DRA: PAUSE.value}
    assert ann_patch == {ANN: f"{DP},{DRA},{ME}"}
    labels, annotations = _apply(labels, label_patch), _apply(annotations, ann_patch)
    back, done = PAUSE.resume(labels, annotations)
    assert back == {DP: "true", DRA: "true", ME: "true"} and done == {ANN: None}


def test_a_label_carrying_our_value_without_the_annotation_is_adopted():
    # The annotation was lost (removed by hand): nobody else writes `paused-for-config-change`.
    labels = {DP: PAUSE.value, ME: "true"}
    label_patch, ann_patch = PAUSE.pause(labels, {}, ORDER)
    assert label_patch == {ME: PAUSE.value} and ann_patch == {ANN: f"{DP},{ME}"}
    # Nothing running at all, but an unlisted label of ours: only the annotation is written.
    assert PAUSE.pause({DP: PAUSE.value}, {}, ORDER) == ({}, {ANN: DP})


def test_a_node_with_nothing_running_pauses_nothing_and_resumes_nothing():
    for labels in ({}, {DP: "false", ME: "false"}, {DP: DRIVER_UPGRADE_PAUSE.value}):
        assert PAUSE.pause(labels, {}, ORDER) == ({}, {})
        assert PAUSE.resume(labels, {}) == ({}, {})
        assert PAUSE.left({}, ["device-plugin"]) == []


def test_a_garbled_annotation_restores_only_labels_carrying_our_value():
    labels = {DP: PAUSE.value, ME: "true"}
    annotations = {ANN: f" {DP} ,,not-a-label,{ME}"}
    assert PAUSE.paused(annotations) == [DP, "not-a-label", ME]
    assert PAUSE.resumed(labels, annotations) == {DP: "true"}


def test_the_operand_order_is_the_callers():
    labels = {DP: "true", ME: "true", TR: "true"}
    assert PAUSE.running(labels, ["test-runner", "device-plugin"]) == [TR, DP]
    assert PAUSE.pause(labels, {}, ["test-runner"]) == ({TR: PAUSE.value}, {ANN: TR})


def test_the_reasons_and_what_the_doctor_reads():
    assert [p.value for p in (DRIVER_UPGRADE_PAUSE, REMEDIATION_PAUSE, CONFIG_CHANGE_PAUSE)] == [
        "paused-for-driver-upgrade",
        "paused-for-remediation",
        "paused-for-config-change",
    ]
    assert OperandPause("x", "a/b", "someone").value == "paused-for-x"
    labels = {ME: REMEDIATION_PAUSE.value, DP: "true", TR: "paused-for-someone-else", "x": "paused-for-y"}
    assert paused_operands(labels) == {"metrics-exporter": "remediation", "test-runner": "someone-else"}
