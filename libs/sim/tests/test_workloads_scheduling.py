"""Pure scheduling decisions: scheduler fit and the DaemonSet controller's node predicate."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from gpuop_sim.workloads.scheduling import (
    NOT_READY_TAINT,
    daemon_placement,
    daemon_pod_tolerations,
    eligible_nodes,
    pod_fits_node,
    toleration_matches,
)


def node(
    name: str = "n1",
    labels: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
    allocatable: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "metadata": {"name": name, "labels": labels or {}},
        "spec": spec,
        "status": {"allocatable": allocatable or {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
            }
        }
    }


def term(key: str, operator: str, *values: str) -> dict[str, Any]:
    """Required affinity with one term holding one expression."""
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        expression["values"] = list(values)
    return affinity({"matchExpressions": [expression]})


GPU = {"feature.node.kubernetes.io/pci-1002.present": "true", "gpu.count": "8"}


@pytest.mark.parametrize(
    ("spec", "labels", "fits"),
    [
        ({}, {}, True),
        ({"nodeSelector": {"feature.node.kubernetes.io/pci-1002.present": "true"}}, GPU, True),
        ({"nodeSelector": {"feature.node.kubernetes.io/pci-1002.present": "true"}}, {}, False),
        ({"nodeSelector": {"a": "1", "b": "2"}}, {"a": "1"}, False),
        (
            term("gpu.count", "In", "8"),
            GPU,
            True,
        ),
        (
            term("gpu.count", "In", "4"),
            GPU,
            False,
        ),
        (
            term("gpu.count", "NotIn", "4"),
            GPU,
            True,
        ),
        (
            term("gpu.count", "NotIn", "4"),
            {},
            True,
        ),
        (term("gpu.count", "Exists"), GPU, True),
        (term("gpu.count", "DoesNotExist"), GPU, False),
        (
            term("gpu.count", "Gt", "4"),
            GPU,
            True,
        ),
        (
            term("gpu.count", "Lt", "4"),
            GPU,
            False,
        ),
        (
            term("gpu.count", "Gt", "x"),
            GPU,
            False,
        ),
        # Terms are ORed, expressions inside a term ANDed.
        (
            affinity(
                {"matchExpressions": [{"key": "missing", "operator": "Exists"}]},
                {"matchExpressions": [{"key": "gpu.count", "operator": "Exists"}]},
            ),
            GPU,
            True,
        ),
        (
            affinity(
                {
                    "matchExpressions": [
                        {"key": "gpu.count", "operator": "Exists"},
                        {"key": "missing", "operator": "Exists"},
                    ]
                }
            ),
            GPU,
            False,
        ),
        (affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}), {}, True),
        (
            affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}),
            {},
            False,
        ),
        (affinity({}), GPU, False),  # an empty term matches nothing
        ({"nodeName": "other"}, {}, False),
        ({"nodeName": "n1"}, {}, True),
    ],
)
def test_selector_and_affinity(spec: dict[str, Any], labels: dict[str, str], fits: bool) -> None:
    ok, reason = pod_fits_node(spec, node(labels=labels))
    assert ok is fits
    assert bool(reason) is not fits


NO_SCHEDULE = {"key": "gpuop.dev/remediation", "value": "running", "effect": "NoSchedule"}
NO_EXECUTE = {"key": "gpuop.dev/broken", "effect": "NoExecute"}
NET_DOWN = {"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}
PREFER = {"key": "soft", "effect": "PreferNoSchedule"}


@pytest.mark.parametrize(
    ("tolerations", "taint", "fits"),
    [
        ([], NO_SCHEDULE, False),
        ([], NO_EXECUTE, False),
        ([], PREFER, True),  # PreferNoSchedule never blocks
        ([{"key": "gpuop.dev/remediation", "operator": "Equal", "value": "running"}], NO_SCHEDULE, True),
        ([{"key": "gpuop.dev/remediation", "value": "running"}], NO_SCHEDULE, True),  # Equal is the default
        ([{"key": "gpuop.dev/remediation", "operator": "Equal", "value": "other"}], NO_SCHEDULE, False),
        ([{"key": "gpuop.dev/remediation", "operator": "Exists"}], NO_SCHEDULE, True),
        ([{"key": "gpuop.dev/remediation", "operator": "Exists", "effect": "NoExecute"}], NO_SCHEDULE, False),
        ([{"operator": "Exists"}], NO_SCHEDULE, True),  # tolerate everything
        ([{"operator": "Exists", "effect": "NoExecute"}], NO_EXECUTE, True),
        ([{"operator": "Exists", "effect": "NoExecute"}], NO_SCHEDULE, False),
        ([{"value": "running"}], NO_SCHEDULE, False),  # empty key needs Exists
    ],
)
def test_taints_and_tolerations(tolerations: list[dict[str, Any]], taint: dict[str, Any], fits: bool) -> None:
    ok, reason = pod_fits_node({"tolerations": tolerations}, node(taints=[taint]))
    assert ok is fits
    if not fits:
        assert taint["key"] in reason


def test_cordoned_node_refuses_plain_pods_but_not_those_tolerating_unschedulable() -> None:
    cordoned = node(unschedulable=True)
    assert pod_fits_node({}, cordoned) == (False, "node is unschedulable (cordoned)")
    tolerant = {"tolerations": [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}]}
    assert pod_fits_node(tolerant, cordoned).fits


def test_not_ready_node_refuses_plain_pods() -> None:
    not_ready = node(taints=[{"key": NOT_READY_TAINT, "effect": "NoSchedule"}])
    ok, reason = pod_fits_node({}, not_ready)
    assert not ok
    assert NOT_READY_TAINT in reason


def test_resources_fit_counts_extended_resources_and_what_is_used() -> None:
    gpu_node = node(allocatable={"cpu": "4", "amd.com/gpu": "8"})
    wants = {"containers": [{"resources": {"limits": {"amd.com/gpu": "2"}, "requests": {"cpu": "500m"}}}]}
    assert pod_fits_node(wants, gpu_node, used={}).fits
    assert pod_fits_node(wants, gpu_node, used={"amd.com/gpu": Decimal(6)}).fits
    assert pod_fits_node(wants, gpu_node, used={"amd.com/gpu": Decimal(7)}) == (
        False,
        "Insufficient amd.com/gpu",
    )
    assert pod_fits_node(wants, node(), used={}) == (False, "Insufficient amd.com/gpu")
    # Without `used`, resources are not considered.
    assert pod_fits_node(wants, node()).fits


def test_eligible_nodes_filters_by_every_rule() -> None:
    nodes = [
        node("gpu-ok", GPU),
        node("gpu-tainted", GPU, taints=[NO_SCHEDULE]),
        node("gpu-cordoned", GPU, unschedulable=True),
        node("cpu", {}),
    ]
    spec = {"nodeSelector": {"feature.node.kubernetes.io/pci-1002.present": "true"}}
    assert [n["metadata"]["name"] for n in eligible_nodes(spec, nodes)] == ["gpu-ok"]


def test_toleration_matches_wildcards() -> None:
    assert toleration_matches({"operator": "Exists"}, {"key": "any", "effect": "NoExecute"})
    assert not toleration_matches({"key": "a", "operator": "Exists"}, {"key": "b", "effect": "NoSchedule"})


@pytest.mark.parametrize(
    ("node_kwargs", "template", "should_run", "keep_running"),
    [
        ({}, {}, True, True),
        ({"unschedulable": True}, {}, True, True),  # daemons ignore cordon
        ({"taints": [{"key": NOT_READY_TAINT, "effect": "NoExecute"}]}, {}, True, True),
        ({"taints": [{"key": NOT_READY_TAINT, "effect": "NoSchedule"}]}, {}, False, True),
        ({"taints": [NO_SCHEDULE]}, {}, False, True),  # blocks new pods, keeps old ones
        ({"taints": [NO_EXECUTE]}, {}, False, False),  # evicts
        (
            {"taints": [NO_EXECUTE]},
            {"tolerations": [{"key": "gpuop.dev/broken", "operator": "Exists"}]},
            True,
            True,
        ),
        ({"labels": {}}, {"nodeSelector": {"gpu": "yes"}}, False, False),
        ({"labels": {"gpu": "yes"}}, {"nodeSelector": {"gpu": "yes"}}, True, True),
        (
            {"taints": [{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]},
            {},
            False,
            True,
        ),
        (
            {"taints": [{"key": "node.kubernetes.io/network-unavailable", "effect": "NoSchedule"}]},
            {"hostNetwork": True},
            True,
            True,
        ),
        ({"taints": [{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}]}, {}, True, True),
    ],
)
def test_daemon_placement(
    node_kwargs: dict[str, Any], template: dict[str, Any], should_run: bool, keep_running: bool
) -> None:
    placement = daemon_placement(template, node(**node_kwargs))
    assert (placement.should_run, placement.should_continue_running) == (should_run, keep_running)


def test_daemon_pod_tolerations_adds_controller_defaults_once() -> None:
    own = {"key": "gpuop.dev/x", "operator": "Exists"}
    tolerations = daemon_pod_tolerations({"tolerations": [own]})
    assert tolerations[0] == own
    assert {
        "key": "node.kubernetes.io/unschedulable",
        "operator": "Exists",
        "effect": "NoSchedule",
    } in tolerations
    assert daemon_pod_tolerations({"tolerations": tolerations}) == tolerations
