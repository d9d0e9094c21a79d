"""plan_labels(): what one pass changes on a Node, given what the labeller owns."""

from __future__ import annotations

import logging

import pytest
from gpuop_node_labeller.ownership import OWNED_ANNOTATION, describe, parse_owned, plan_labels

DESIRED = {"amd.com/gpu.family": "AI", "gpuop.dev/gpu.count": "8"}
OWNED = {OWNED_ANNOTATION: "amd.com/gpu.family,gpuop.dev/gpu.count"}


def test_first_pass_sets_everything_and_records_ownership() -> None:
    plan = plan_labels({"kubernetes.io/hostname": "n1"}, {}, DESIRED)
    assert plan.set == DESIRED
    assert plan.removed == ()
    assert plan.patch() == {
        "metadata": {
            "labels": DESIRED,
            "annotations": {OWNED_ANNOTATION: "amd.com/gpu.family,gpuop.dev/gpu.count"},
        }
    }


def test_nothing_to_do_when_labels_and_ownership_match() -> None:
    plan = plan_labels({**DESIRED, "other": "x"}, OWNED, DESIRED)
    assert plan.empty
    assert describe(plan) == []


def test_stale_owned_label_is_removed_and_foreign_labels_are_left_alone() -> None:
    current = {
        **DESIRED,
        "amd.com/gpu.vram": "64G",  # ours from an earlier pass, no longer computed
        "amd.com/gpu.cu-count": "104",  # same prefix, but written by someone else
        "team": "ml",
    }
    annotations = {OWNED_ANNOTATION: "amd.com/gpu.family,amd.com/gpu.vram,gpuop.dev/gpu.count"}
    plan = plan_labels(current, annotations, DESIRED)
    assert plan.set == {}
    assert plan.removed == ("amd.com/gpu.vram",)
    patch = plan.patch("42")
    assert patch == {
        "metadata": {
            "labels": {"amd.com/gpu.vram": None},
            "annotations": {OWNED_ANNOTATION: "amd.com/gpu.family,gpuop.dev/gpu.count"},
            "resourceVersion": "42",
        }
    }
    assert describe(plan) == ["- amd.com/gpu.vram=64G"]


def test_changed_value_is_one_key_in_the_patch() -> None:
    plan = plan_labels({**DESIRED, "gpuop.dev/gpu.count": "7"}, OWNED, DESIRED)
    assert plan.patch() == {"metadata": {"labels": {"gpuop.dev/gpu.count": "8"}}}
    assert describe(plan) == ["~ gpuop.dev/gpu.count=7 -> 8"]


def test_owned_label_already_deleted_by_someone_is_not_deleted_again() -> None:
    plan = plan_labels(DESIRED, {OWNED_ANNOTATION: f"{OWNED[OWNED_ANNOTATION]},amd.com/gpu.vram"}, DESIRED)
    assert plan.removed == ()
    assert plan.owned_changed


def test_nothing_desired_clears_the_annotation() -> None:
    plan = plan_labels(DESIRED, OWNED, {})
    assert plan.removed == tuple(sorted(DESIRED))
    assert plan.patch()["metadata"]["annotations"] == {OWNED_ANNOTATION: None}


def test_malformed_annotation_entries_are_ignored_with_a_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        owned = parse_owned({OWNED_ANNOTATION: "amd.com/gpu.family, bad key!,a/b/c,,"})
    assert owned == {"amd.com/gpu.family"}
    assert any(OWNED_ANNOTATION in str(r.__dict__.get("annotation")) for r in caplog.records)
