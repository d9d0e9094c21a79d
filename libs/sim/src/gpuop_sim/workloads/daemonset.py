"""DaemonSet controller: one pod per eligible node, rolling template updates, status counts.

`plan_daemonset` is the whole decision as a pure function of (DaemonSet, nodes, its pods); the
controller only lists from caches and carries the plan out. Daemon pods are created already bound
(`spec.nodeName`), carry the controller's default tolerations and a `controller-revision-hash` label
derived from the template, and a node's replacement pod is created only once the old one is gone, so
a restarted agent never races its predecessor for a port.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field

from gpuop_sim.workloads.objects import (
    REVISION_HASH_LABEL,
    Obj,
    controller_uid,
    int_or_percent,
    is_deleting,
    labels_of,
    meta,
    name_of,
    namespace_of,
    owner_reference,
    pod_is_ready,
    pod_phase,
    spec_of,
    status_of,
    template_hash,
)
from gpuop_sim.workloads.scheduling import daemon_placement, daemon_pod_tolerations


@dataclass
class DaemonSetPlan:
    create_on: list[str] = field(default_factory=list)  # node names that need a new pod
    delete: list[Obj] = field(default_factory=list)  # pods to delete
    status: Obj = field(default_factory=dict)


def daemon_pod_name(ds_name: str, node_name: str) -> str:
    """Deterministic per-node name: a repeated create is a harmless 409, never a second pod.

    (A clash with another node's name is resolved by the controller with a generated name.)
    """
    suffix = hashlib.sha256(node_name.encode()).hexdigest()[:10]
    return f"{ds_name[:52]}-{suffix}"


def build_daemon_pod(ds: Obj, node_name: str) -> Obj:
    template = spec_of(ds).get("template") or {}
    template_meta = template.get("metadata") or {}
    pod_spec = copy.deepcopy(template.get("spec") or {})
    pod_spec["nodeName"] = node_name
    pod_spec["tolerations"] = daemon_pod_tolerations(pod_spec)
    labels = dict(template_meta.get("labels") or {})
    labels[REVISION_HASH_LABEL] = template_hash(template)
    labels["pod-template-generation"] = str(meta(ds).get("generation", 1))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": daemon_pod_name(name_of(ds), node_name),
            "namespace": namespace_of(ds),
            "labels": labels,
            "annotations": dict(template_meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(ds)],
        },
        "spec": pod_spec,
    }


def plan_daemonset(ds: Obj, nodes: list[Obj], pods: list[Obj]) -> DaemonSetPlan:
    """What to create, delete and report for one DaemonSet, given all nodes and all pods."""
    plan = DaemonSetPlan()
    uid = meta(ds).get("uid")
    template = spec_of(ds).get("template") or {}
    template_spec = template.get("spec") or {}
    current_hash = template_hash(template)
    by_node: dict[str, list[Obj]] = {}
    for pod in pods:
        if controller_uid(pod) == uid:
            by_node.setdefault(str(spec_of(pod).get("nodeName") or ""), []).append(pod)

    desired = current = ready = updated = misscheduled = 0
    outdated_ready: list[Obj] = []
    unavailable = 0
    for node in sorted(nodes, key=name_of):
        node_name = name_of(node)
        placement = daemon_placement(template_spec, node)
        node_pods = by_node.pop(node_name, [])
        terminating = [p for p in node_pods if is_deleting(p)]
        failed = [p for p in node_pods if not is_deleting(p) and pod_phase(p) == "Failed"]
        active = [p for p in node_pods if not is_deleting(p) and pod_phase(p) != "Failed"]
        plan.delete.extend(failed)
        if not placement.should_continue_running:
            plan.delete.extend(active)
            if active:
                misscheduled += 1
            continue
        if not placement.should_run:
            if active:
                misscheduled += 1
            continue
        desired += 1
        if not active:
            unavailable += 1
            if not terminating:
                plan.create_on.append(node_name)
            continue
        # Keep the oldest pod if a node somehow has several.
        active.sort(key=lambda p: str(meta(p).get("creationTimestamp") or ""))
        keep, extra = active[0], active[1:]
        plan.delete.extend(extra)
        current += 1
        is_current = labels_of(keep).get(REVISION_HASH_LABEL) == current_hash
        updated += is_current
        if pod_is_ready(keep):
            ready += 1
            if not is_current:
                outdated_ready.append(keep)
        else:
            unavailable += 1
            if not is_current:
                # An old pod that is not serving anyway: replace it without spending the budget.
                plan.delete.append(keep)

    # Pods on nodes that no longer exist.
    for orphaned in by_node.values():
        plan.delete.extend(p for p in orphaned if not is_deleting(p))

    strategy = spec_of(ds).get("updateStrategy") or {}
    if (strategy.get("type") or "RollingUpdate") == "RollingUpdate":
        rolling = strategy.get("rollingUpdate") or {}
        max_unavailable = max(int_or_percent(rolling.get("maxUnavailable"), desired, 1, round_up=True), 1)
        budget = max_unavailable - unavailable
        plan.delete.extend(outdated_ready[: max(budget, 0)])

    plan.status = {
        "observedGeneration": meta(ds).get("generation", 1),
        "desiredNumberScheduled": desired,
        "currentNumberScheduled": current,
        "numberMisscheduled": misscheduled,
        "numberReady": ready,
        "updatedNumberScheduled": updated,
        "numberAvailable": ready,
        "numberUnavailable": desired - ready,
    }
    return plan


def status_changed(ds: Obj, new_status: Obj) -> bool:
    old = status_of(ds)
    return any(old.get(k, 0) != v for k, v in new_status.items())
