"""Job controller as a pure planner: run pods until `completions` succeed or `backoffLimit` is spent."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from gpuop_sim.workloads.objects import (
    Obj,
    controller_uid,
    is_deleting,
    meta,
    name_of,
    namespace_of,
    owner_reference,
    pod_is_ready,
    pod_phase,
    spec_of,
    status_of,
)


@dataclass
class JobPlan:
    create: int = 0
    delete: list[Obj] = field(default_factory=list)
    status: Obj = field(default_factory=dict)


def _int(value: Any, default: int) -> int:
    try:
        return default if value is None else int(value)
    except (TypeError, ValueError):
        return default


def job_finished(job: Obj) -> str | None:
    """ "Complete" or "Failed" once the Job has that condition."""
    for cond in status_of(job).get("conditions") or []:
        if cond.get("type") in ("Complete", "Failed") and cond.get("status") == "True":
            return str(cond["type"])
    return None


def build_job_pod(job: Obj) -> Obj:
    template = spec_of(job).get("template") or {}
    template_meta = template.get("metadata") or {}
    uid = str(meta(job).get("uid", ""))
    labels = dict(template_meta.get("labels") or {})
    labels.update(
        {
            "batch.kubernetes.io/job-name": name_of(job),
            "job-name": name_of(job),
            "batch.kubernetes.io/controller-uid": uid,
            "controller-uid": uid,
        }
    )
    spec = copy.deepcopy(template.get("spec") or {})
    spec.setdefault("restartPolicy", "Never")
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{name_of(job)}-",
            "namespace": namespace_of(job),
            "labels": labels,
            "annotations": dict(template_meta.get("annotations") or {}),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": spec,
    }


def plan_job(job: Obj, pods: list[Obj], now: str) -> JobPlan:
    """`now` is an RFC 3339 timestamp used for startTime/completionTime/conditions."""
    plan = JobPlan()
    uid = meta(job).get("uid")
    owned = [p for p in pods if controller_uid(p) == uid]
    succeeded = sum(1 for p in owned if pod_phase(p) == "Succeeded")
    failed = sum(1 for p in owned if pod_phase(p) == "Failed")
    active = [p for p in owned if not is_deleting(p) and pod_phase(p) not in ("Succeeded", "Failed")]
    spec = spec_of(job)
    completions = _int(spec.get("completions"), 1)
    parallelism = _int(spec.get("parallelism"), 1)
    backoff_limit = _int(spec.get("backoffLimit"), 6)
    old = status_of(job)
    status: Obj = {
        "startTime": old.get("startTime") or now,
        "active": len(active),
        "succeeded": succeeded,
        "failed": failed,
        "ready": sum(1 for p in active if pod_is_ready(p)),
    }
    conditions = list(old.get("conditions") or [])
    finished = job_finished(job)
    if finished is None and failed > backoff_limit:
        finished = "Failed"
        conditions.append(
            _condition("Failed", "BackoffLimitExceeded", "Job has reached the backoff limit", now)
        )
    elif finished is None and succeeded >= completions:
        finished = "Complete"
        conditions.append(_condition("Complete", "Completed", "Job completed", now))
        status["completionTime"] = now
    if finished is not None:
        plan.delete.extend(active)
        status["active"] = 0
    else:
        wanted_active = min(parallelism, completions - succeeded)
        plan.create = max(wanted_active - len(active), 0)
    if old.get("completionTime"):
        status["completionTime"] = old["completionTime"]
    status["conditions"] = conditions
    plan.status = status
    return plan


def _condition(kind: str, reason: str, message: str, now: str) -> Obj:
    return {
        "type": kind,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }
