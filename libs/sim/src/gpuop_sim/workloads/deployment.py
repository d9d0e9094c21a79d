"""Deployment and ReplicaSet controllers as pure planners.

A Deployment owns one ReplicaSet per template (named `<deployment>-<template hash>`, labelled
`pod-template-hash`); the current one is scaled to `spec.replicas` and older ones to zero. That is a
surge-everything rollout: enough for a simulator whose pods start in milliseconds. A ReplicaSet keeps
`spec.replicas` unscheduled pods in existence; the scheduler binds them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gpuop_sim.workloads.objects import (
    POD_TEMPLATE_HASH_LABEL,
    Obj,
    controller_uid,
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


def _replicas(obj: Obj) -> int:
    value: Any = spec_of(obj).get("replicas")
    return 1 if value is None else max(int(value), 0)


@dataclass
class DeploymentPlan:
    create: list[Obj] = field(default_factory=list)  # ReplicaSets to create
    scale: list[tuple[Obj, int]] = field(default_factory=list)  # (ReplicaSet, replicas)
    status: Obj = field(default_factory=dict)


def build_replicaset(deployment: Obj) -> Obj:
    template = copy.deepcopy(spec_of(deployment).get("template") or {})
    pod_hash = template_hash(spec_of(deployment).get("template") or {})
    template.setdefault("metadata", {}).setdefault("labels", {})[POD_TEMPLATE_HASH_LABEL] = pod_hash
    selector = copy.deepcopy(spec_of(deployment).get("selector") or {})
    selector.setdefault("matchLabels", {})[POD_TEMPLATE_HASH_LABEL] = pod_hash
    labels = dict(template["metadata"]["labels"])
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": f"{name_of(deployment)}-{pod_hash}"[:63],
            "namespace": namespace_of(deployment),
            "labels": labels,
            "ownerReferences": [owner_reference(deployment)],
        },
        "spec": {"replicas": _replicas(deployment), "selector": selector, "template": template},
    }


def plan_deployment(deployment: Obj, replicasets: list[Obj]) -> DeploymentPlan:
    plan = DeploymentPlan()
    uid = meta(deployment).get("uid")
    owned = [rs for rs in replicasets if controller_uid(rs) == uid and not is_deleting(rs)]
    pod_hash = template_hash(spec_of(deployment).get("template") or {})
    wanted = _replicas(deployment)
    current = [rs for rs in owned if labels_of(rs).get(POD_TEMPLATE_HASH_LABEL) == pod_hash]
    if not current:
        plan.create.append(build_replicaset(deployment))
    for rs in owned:
        target = wanted if rs in current else 0
        if _replicas(rs) != target:
            plan.scale.append((rs, target))
    replicas = sum(int(status_of(rs).get("replicas") or 0) for rs in owned)
    ready = sum(int(status_of(rs).get("readyReplicas") or 0) for rs in owned)
    updated = sum(int(status_of(rs).get("replicas") or 0) for rs in current)
    available = ready >= wanted
    plan.status = {
        "observedGeneration": meta(deployment).get("generation", 1),
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "unavailableReplicas": max(wanted - ready, 0),
        "conditions": [
            {
                "type": "Available",
                "status": "True" if available else "False",
                "reason": "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "message": f"{ready}/{wanted} replicas ready",
            }
        ],
    }
    return plan


@dataclass
class ReplicaSetPlan:
    create: int = 0
    delete: list[Obj] = field(default_factory=list)
    status: Obj = field(default_factory=dict)


def build_replica_pod(rs: Obj) -> Obj:
    template = spec_of(rs).get("template") or {}
    template_meta = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name_of(rs)}-",
            "namespace": namespace_of(rs),
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": dict(template_meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(rs)],
        },
        "spec": copy.deepcopy(template.get("spec") or {}),
    }


def _scale_down_order(pod: Obj) -> tuple[int, int, str]:
    # As the ReplicaSet controller: unscheduled first, then not ready, then newest.
    scheduled = 1 if spec_of(pod).get("nodeName") else 0
    ready = 1 if pod_is_ready(pod) else 0
    created = str(meta(pod).get("creationTimestamp") or "")
    return (scheduled, ready, "".join(chr(0x10FFFF - ord(c)) for c in created))


def plan_replicaset(rs: Obj, pods: list[Obj]) -> ReplicaSetPlan:
    plan = ReplicaSetPlan()
    uid = meta(rs).get("uid")
    owned = [p for p in pods if controller_uid(p) == uid and not is_deleting(p)]
    failed = [p for p in owned if pod_phase(p) in ("Failed", "Succeeded")]
    active = [p for p in owned if p not in failed]
    plan.delete.extend(failed)
    wanted = _replicas(rs)
    if len(active) < wanted:
        plan.create = wanted - len(active)
    elif len(active) > wanted:
        plan.delete.extend(sorted(active, key=_scale_down_order)[: len(active) - wanted])
    ready = sum(1 for p in active if pod_is_ready(p))
    plan.status = {
        "observedGeneration": meta(rs).get("generation", 1),
        "replicas": len(active),
        "fullyLabeledReplicas": len(active),
        "readyReplicas": ready,
        "availableReplicas": ready,
    }
    return plan
