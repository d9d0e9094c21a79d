"""The pure rules under the simulator: selector grammar, strategic merge, FieldsV1, history."""

from __future__ import annotations

from typing import Any

import pytest
from gpuop_sim.apiserver import managed, patches
from gpuop_sim.apiserver.selectors import (
    SelectorError,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from gpuop_sim.apiserver.store import Store, TooOldError


def obj(**labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "x", "labels": labels}}


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("a=b", {"a": "b"}, True),
        ("a==b", {"a": "c"}, False),
        ("a!=b", {}, True),
        ("a in (b, c)", {"a": "c"}, True),
        ("a notin (b)", {}, True),
        ("a", {"a": ""}, True),
        ("!a", {"a": "x"}, False),
        ("a=b,c", {"a": "b"}, False),
        ("amd.com/gpu.present=true", {"amd.com/gpu.present": "true"}, True),
        ("a=", {"a": ""}, True),
        ("", {"z": "1"}, True),
    ],
)
def test_label_selector_semantics(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert labels_match(parse_label_selector(selector), obj(**labels)) is matches


@pytest.mark.parametrize("selector", ["tier in gpu", "a in (b", "=x", "a b", "a/b/c=d"])
def test_label_selector_errors(selector: str) -> None:
    with pytest.raises(SelectorError, match=r"unable to parse requirement|found"):
        parse_label_selector(selector)


def test_field_selector_names_the_supported_fields() -> None:
    with pytest.raises(
        SelectorError, match=r'"spec\.x" is not a known field selector: only "metadata\.name"'
    ):
        parse_field_selector("spec.x=1", ())
    with pytest.raises(SelectorError, match=r"field label not supported: spec\.x"):
        parse_field_selector("spec.x=1", (), custom=True)
    (req,) = parse_field_selector("spec.unschedulable!=true", ("spec.unschedulable",))
    assert req.matches({"spec": {}}) and not req.matches({"spec": {"unschedulable": True}})


def test_strategic_merge_directives() -> None:
    target = {
        "metadata": {"finalizers": ["a"], "labels": {"x": "1", "y": "2"}},
        "spec": {
            "containers": [
                {"name": "c", "volumeMounts": [{"mountPath": "/a", "name": "v"}], "args": ["1", "2"]}
            ],
            "ports": [{"port": 80, "name": "http"}],
        },
    }
    patch = {
        "metadata": {"finalizers": ["b", "a"], "labels": {"$patch": "replace", "z": "3"}},
        "spec": {
            "$setElementOrder/containers": [{"name": "c"}],
            "containers": [
                {
                    "name": "c",
                    "volumeMounts": [{"mountPath": "/b", "name": "w"}],
                    "$deleteFromPrimitiveList/args": ["1"],
                }
            ],
            "ports": [{"port": 80, "targetPort": 8080}],
        },
    }
    out = patches.strategic_merge_patch(target, patch, "Service")
    assert out["metadata"] == {"finalizers": ["a", "b"], "labels": {"z": "3"}}
    container = out["spec"]["containers"][0]
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/a", "/b"]
    assert container["args"] == ["2"]
    assert out["spec"]["ports"] == [
        {"port": 80, "name": "http", "targetPort": 8080}
    ]  # Service ports by `port`
    assert target["metadata"]["labels"] == {"x": "1", "y": "2"}  # inputs are not mutated


def test_merge_patch_is_rfc7386() -> None:
    assert patches.merge_patch({"a": {"b": 1, "c": 2}, "l": [1]}, {"a": {"b": None}, "l": [2]}) == {
        "a": {"c": 2},
        "l": [2],
    }
    assert patches.merge_patch({"a": 1}, {"a": {"b": None}}) == {"a": {}}


def test_fields_v1_round_trip() -> None:
    paths = {("f:data", "f:a"), ("f:spec", "."), ("f:spec", "f:containers", 'k:{"name":"c"}', "f:image")}
    tree = managed.to_fields_v1(paths)
    assert tree["f:spec"]["."] == {}
    assert managed.from_fields_v1(tree) == paths


def test_store_snapshots_and_history_window() -> None:
    store = Store(history_limit=2)
    key = ("", "configmaps")
    store.ensure_table(key)
    for value in ("1", "2", "3"):
        rv = store.next_rv()
        cm = {"metadata": {"name": "x", "namespace": "d", "resourceVersion": str(rv)}, "data": {"v": value}}
        store.put(key, cm, created=value == "1")
    assert [s.obj["data"]["v"] for s in store.snapshot(key, 2)] == ["2"]
    with pytest.raises(TooOldError):
        store.snapshot(key, 0)  # the first write fell out of the 2-event history
    assert [e.rv for e in store.events_since(key, 1)] == [2, 3]
    store.compact()
    with pytest.raises(TooOldError):
        store.snapshot(key, 2)
    assert [e.rv for e in store.events_since(key, 2)] == [3]  # watch history survives a compaction
