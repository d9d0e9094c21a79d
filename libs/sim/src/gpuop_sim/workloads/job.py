"""Job controller as a pure planner, with kube-controller-manager's batch/v1 semantics (v1.31+).

- Pods run until `completions` succeed; a Job whose failed pods exceed `backoffLimit` (default 6;
  0 = the first failure) fails with reason `BackoffLimitExceeded`; one active longer than
  `activeDeadlineSeconds` since `status.startTime` fails with reason `DeadlineExceeded`.
- As since v1.31, the interim condition comes first (`FailureTarget` / `SuccessCriteriaMet`), the
  controller deletes the Job's remaining active pods, and the terminal condition (`Failed` /
  `Complete`, same reason) is added only once no pod of the Job is still running or terminating.
  Pods the controller deletes while failing the Job count as failed.
- `ttlSecondsAfterFinished` (the TTL-after-finished controller): that long after the terminal
  condition's `lastTransitionTime` the Job is deleted with foreground propagation, so the garbage
  collector removes its pods first.
- `succeeded` / `failed` never go down when a finished pod is removed (the real controller tracks them
  with a finalizer; the count is what was observed).

`plan_job` takes `now` explicitly; `JobPlan.requeue_after` says when the answer next changes by time
alone (a deadline or a TTL), so the controller looks again then rather than at the next resync.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import UTC, datetime
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

DEFAULT_BACKOFF_LIMIT = 6
_FAILED_MESSAGES = {
    "BackoffLimitExceeded": "Job has reached the specified backoff limit",
    "DeadlineExceeded": "Job was active longer than specified deadline",
}
_INTERIM = {"Failed": "FailureTarget", "Complete": "SuccessCriteriaMet"}


@dataclass
class JobPlan:
    create: int = 0
    delete: list[Obj] = field(default_factory=list)
    status: Obj = field(default_factory=dict)
    delete_job: bool = False  # ttlSecondsAfterFinished has passed
    requeue_after: float | None = None  # seconds until a deadline or TTL is due


def _int(value: Any, default: int) -> int:
    try:
        return default if value is None else int(value)
    except (TypeError, ValueError):
        return default


def parse_time(text: str) -> datetime:
    """RFC 3339 (`2026-01-02T03:04:05Z`, fractions allowed) -> aware datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def _condition_of(job_status: Obj, kind: str) -> Obj | None:
    for cond in job_status.get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def job_finished(job: Obj) -> str | None:
    """ "Complete" or "Failed" once the Job has that condition."""
    for kind in ("Complete", "Failed"):
        if _condition_of(status_of(job), kind) is not None:
            return kind
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


def _ttl_plan(job: Obj, finished: str, now: datetime, plan: JobPlan) -> None:
    ttl = spec_of(job).get("ttlSecondsAfterFinished")
    if ttl is None:
        return
    cond = _condition_of(status_of(job), finished) or {}
    stamp = cond.get("lastTransitionTime") or status_of(job).get("completionTime")
    if not stamp:
        return
    remaining = (parse_time(str(stamp)) - now).total_seconds() + _int(ttl, 0)
    if remaining <= 0:
        plan.delete_job = True
    else:
        plan.requeue_after = remaining


def plan_job(job: Obj, pods: list[Obj], now: str) -> JobPlan:
    """`now` is an RFC 3339 timestamp used for startTime/completionTime/conditions and deadlines."""
    plan = JobPlan()
    clock = parse_time(now)
    uid = meta(job).get("uid")
    owned = [p for p in pods if controller_uid(p) == uid]
    terminal = ("Succeeded", "Failed")
    active = [p for p in owned if not is_deleting(p) and pod_phase(p) not in terminal]
    terminating = [p for p in owned if is_deleting(p) and pod_phase(p) not in terminal]
    spec = spec_of(job)
    old = status_of(job)
    succeeded = max(sum(1 for p in owned if pod_phase(p) == "Succeeded"), _int(old.get("succeeded"), 0))
    failed = max(sum(1 for p in owned if pod_phase(p) == "Failed"), _int(old.get("failed"), 0))
    completions = _int(spec.get("completions"), 1)
    parallelism = _int(spec.get("parallelism"), 1)
    backoff_limit = _int(spec.get("backoffLimit"), DEFAULT_BACKOFF_LIMIT)
    deadline = spec.get("activeDeadlineSeconds")
    start_time = str(old.get("startTime") or now)
    status: Obj = {"startTime": start_time}
    conditions = list(old.get("conditions") or [])
    finished = job_finished(job)
    if finished is not None:
        status.update(active=0, succeeded=succeeded, failed=failed, ready=0, terminating=len(terminating))
        if old.get("completionTime"):
            status["completionTime"] = old["completionTime"]
        status["conditions"] = conditions
        plan.status = status
        _ttl_plan(job, finished, clock, plan)
        return plan

    target = _condition_of(old, "FailureTarget") or _condition_of(old, "SuccessCriteriaMet")
    if target is None:
        reason = ""
        if failed > backoff_limit:
            reason = "BackoffLimitExceeded"
        elif deadline is not None:
            left = parse_time(start_time).timestamp() + _int(deadline, 0) - clock.timestamp()
            if left <= 0:
                reason = "DeadlineExceeded"
            else:
                plan.requeue_after = left
        if reason:
            target = _condition("FailureTarget", reason, _FAILED_MESSAGES[reason], now)
        elif succeeded >= completions:
            target = _condition(
                "SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods", now
            )
        if target is not None:
            conditions.append(target)
            plan.requeue_after = None
    if target is not None:
        # Failing: the remaining pods are deleted and count as failed; succeeding: they are removed.
        plan.delete.extend(active)
        if target["type"] == "FailureTarget":
            failed += len(active)
        terminating = [*terminating, *active]
        active = []
        if not terminating:
            kind = "Failed" if target["type"] == "FailureTarget" else "Complete"
            conditions.append(_condition(kind, str(target["reason"]), str(target["message"]), now))
            if kind == "Complete":
                status["completionTime"] = now
    else:
        wanted_active = min(parallelism, completions - succeeded)
        plan.create = max(wanted_active - len(active), 0)
    status.update(
        active=len(active),
        succeeded=succeeded,
        failed=failed,
        ready=sum(1 for p in active if pod_is_ready(p)),
        terminating=len(terminating),
        conditions=conditions,
    )
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
