"""Scheduling decisions as pure functions: does a pod spec fit a node, and where may a daemon run.

These follow the kube-scheduler filter plugins we need (NodeName, NodeUnschedulable, NodeAffinity,
TaintToleration, NodeResourcesFit) and the DaemonSet controller's own node predicate, which differs
from the scheduler: cordon never stops a daemon pod, and an untolerated NoSchedule taint only stops new
pods while an untolerated NoExecute taint also evicts running ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

from kubernetes.utils.quantity import parse_quantity as _untyped_parse_quantity

from gpuop_sim.workloads.objects import Obj, labels_of, name_of, spec_of, status_of

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"

# Tolerations the DaemonSet controller adds to every daemon pod it creates (pkg/controller/daemon/util).
DAEMONSET_DEFAULT_TOLERATIONS: tuple[Obj, ...] = (
    {"key": NOT_READY_TAINT, "operator": "Exists", "effect": "NoExecute"},
    {"key": UNREACHABLE_TAINT, "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": UNSCHEDULABLE_TAINT, "operator": "Exists", "effect": "NoSchedule"},
)
HOST_NETWORK_TOLERATION: Obj = {
    "key": "node.kubernetes.io/network-unavailable",
    "operator": "Exists",
    "effect": "NoSchedule",
}
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")
# The kubernetes package ships no type hints; this pins the one we rely on.
_parse_quantity: Callable[[Any], Decimal] = _untyped_parse_quantity


class Fit(NamedTuple):
    """Outcome of a fit check: `reason` names the first failing filter, empty when it fits."""

    fits: bool
    reason: str = ""


def toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """v1 Toleration.ToleratesTaint: empty effect/key act as wildcards, Exists ignores the value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key"):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    if not key:
        # An empty key is only valid with Exists; treat anything else as not tolerating.
        return False
    return str(toleration.get("value") or "") == str(taint.get("value") or "")


def untolerated_taint(
    taints: Iterable[Mapping[str, Any]],
    tolerations: Iterable[Mapping[str, Any]],
    effects: tuple[str, ...] = _BLOCKING_EFFECTS,
) -> Mapping[str, Any] | None:
    """The first taint with one of `effects` that no toleration matches."""
    tols = list(tolerations)
    for taint in taints:
        if taint.get("effect") not in effects:
            continue
        if not any(toleration_matches(tol, taint) for tol in tols):
            return taint
    return None


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key = str(expr.get("key", ""))
    operator = expr.get("operator", "")
    values = [str(v) for v in expr.get("values") or []]
    present = key in labels
    if operator == "In":
        return present and labels[key] in values
    if operator == "NotIn":
        return not present or labels[key] not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(values) != 1:
            return False
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if operator == "Gt" else have < want
    return False


def node_selector_term_matches(term: Mapping[str, Any], node: Obj) -> bool:
    """One NodeSelectorTerm: all matchExpressions (labels) and matchFields (metadata.name) hold.

    A term with no requirements matches no node, as in the scheduler.
    """
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    labels = labels_of(node)
    if not all(_expression_matches(expr, labels) for expr in expressions):
        return False
    field_values = {"metadata.name": name_of(node)}
    return all(expr.get("key") in field_values and _expression_matches(expr, field_values) for expr in fields)


def node_affinity_matches(pod_spec: Mapping[str, Any], node: Obj) -> bool:
    """nodeSelector (all pairs) and required node affinity (any term) both hold."""
    labels = labels_of(node)
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != str(value):
            return False
    required = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if not required:
        return True
    terms = required.get("nodeSelectorTerms") or []
    return any(node_selector_term_matches(term, node) for term in terms)


def _quantity(value: Any) -> Decimal:
    try:
        return _parse_quantity(value)
    except (ValueError, InvalidOperation, TypeError):
        return Decimal(0)


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """Sum of container requests (limits stand in for requests when only limits are set)."""
    total: dict[str, Decimal] = {}
    for container in pod_spec.get("containers") or []:
        resources = container.get("resources") or {}
        requested = dict(resources.get("limits") or {})
        requested.update(resources.get("requests") or {})
        for resource, value in requested.items():
            total[resource] = total.get(resource, Decimal(0)) + _quantity(value)
    return total


def resources_fit(pod_spec: Mapping[str, Any], node: Obj, used: Mapping[str, Decimal] | None = None) -> Fit:
    """NodeResourcesFit: every requested resource fits in allocatable minus what is already used."""
    allocatable = status_of(node).get("allocatable") or {}
    used = used or {}
    for resource, amount in pod_requests(pod_spec).items():
        if amount <= 0:
            continue
        free = _quantity(allocatable.get(resource, 0)) - used.get(resource, Decimal(0))
        if amount > free:
            return Fit(False, f"Insufficient {resource}")
    return Fit(True)


def pod_fits_node(pod_spec: Mapping[str, Any], node: Obj, used: Mapping[str, Decimal] | None = None) -> Fit:
    """Whether the scheduler may bind a pod with `pod_spec` to `node`, and why not if it may not.

    `used` is the sum of requests of pods already on the node; when None, resources are not checked.
    """
    wanted_node = pod_spec.get("nodeName")
    if wanted_node and wanted_node != name_of(node):
        return Fit(False, f"pod is pinned to node {wanted_node}")
    tolerations = list(pod_spec.get("tolerations") or [])
    cordon = {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}
    if spec_of(node).get("unschedulable") and not any(toleration_matches(t, cordon) for t in tolerations):
        return Fit(False, "node is unschedulable (cordoned)")
    if not node_affinity_matches(pod_spec, node):
        return Fit(False, "node does not match the pod's nodeSelector/affinity")
    taint = untolerated_taint(spec_of(node).get("taints") or [], tolerations)
    if taint is not None:
        return Fit(False, f"node has untolerated taint {taint.get('key')}:{taint.get('effect')}")
    if used is not None:
        return resources_fit(pod_spec, node, used)
    return Fit(True)


def eligible_nodes(
    pod_spec: Mapping[str, Any],
    nodes: Iterable[Obj],
    used: Mapping[str, Mapping[str, Decimal]] | None = None,
) -> list[Obj]:
    """Nodes a pod fits on; `used` maps node name to the requests already placed there."""
    result = []
    for node in nodes:
        node_used = None if used is None else used.get(name_of(node), {})
        if pod_fits_node(pod_spec, node, node_used).fits:
            result.append(node)
    return result


def daemon_pod_tolerations(pod_spec: Mapping[str, Any]) -> list[Obj]:
    """The template's tolerations plus those the DaemonSet controller adds (no duplicates)."""
    tolerations: list[Obj] = [dict(t) for t in pod_spec.get("tolerations") or []]
    extra = list(DAEMONSET_DEFAULT_TOLERATIONS)
    if pod_spec.get("hostNetwork"):
        extra.append(HOST_NETWORK_TOLERATION)
    for toleration in extra:
        if toleration not in tolerations:
            tolerations.append(dict(toleration))
    return tolerations


@dataclass(frozen=True)
class DaemonPlacement:
    """DaemonSet controller verdict for one node: start a pod? keep an existing one?"""

    should_run: bool
    should_continue_running: bool
    reason: str = ""


def daemon_placement(pod_spec: Mapping[str, Any], node: Obj) -> DaemonPlacement:
    """NodeShouldRunDaemonPod: affinity decides both; NoSchedule blocks new pods, NoExecute evicts.

    `pod_spec` is the DaemonSet's template spec; the controller's default tolerations are added here,
    so cordoned and not-ready:NoExecute nodes still run daemons as in a real cluster.
    """
    wanted_node = pod_spec.get("nodeName")
    if wanted_node and wanted_node != name_of(node):
        return DaemonPlacement(False, False, f"template is pinned to node {wanted_node}")
    if not node_affinity_matches(pod_spec, node):
        return DaemonPlacement(False, False, "node does not match nodeSelector/affinity")
    tolerations = daemon_pod_tolerations(pod_spec)
    taints = spec_of(node).get("taints") or []
    evicting = untolerated_taint(taints, tolerations, ("NoExecute",))
    if evicting is not None:
        return DaemonPlacement(False, False, f"untolerated taint {evicting.get('key')}:NoExecute")
    blocking = untolerated_taint(taints, tolerations, ("NoSchedule",))
    if blocking is not None:
        return DaemonPlacement(False, True, f"untolerated taint {blocking.get('key')}:NoSchedule")
    return DaemonPlacement(True, True)
