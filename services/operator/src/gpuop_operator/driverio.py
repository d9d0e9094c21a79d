"""The driver lifecycle's API edge: read what `driverflow` needs, send what it planned.

Reads: the pods on nodes being drained (one list per such node and pass), and once per failed Job
the termination message of its pod (the playbook summary: which task failed and its stderr).
Writes: Job creates (409 = the Job is already there: adopted) and deletes (uid precondition), pod
evictions (429 = a PodDisruptionBudget refuses for now: tried again next pass) or deletions, and
Events on the Node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

from gpuop_common.config.driver import DriverConfig
from gpuop_common.kube import EventRecorder, ObjectRef
from gpuop_common.kubejson import JOBS, is_status
from kubernetes.client.exceptions import ApiException

from gpuop_operator.drain import NodePod, node_pod
from gpuop_operator.driverflow import DriverPlan, FailedRun
from gpuop_operator.driverjob import JobSettings, JobView, build_job, log_tail_of_pod, summary_of_pod
from gpuop_operator.kubeio import PODS, KubeJson
from gpuop_operator.upgrade import STATE_LABEL, UpgradeState

log = logging.getLogger(__name__)
JsonObj = dict[str, Any]


def pods_to_drain(kube: KubeJson, nodes: Iterable[Any]) -> dict[str, list[NodePod]]:
    """Every pod on each node that is in the `draining` step."""
    found: dict[str, list[NodePod]] = {}
    for node in nodes:
        if node.labels.get(STATE_LABEL) != UpgradeState.DRAINING.value:
            continue
        items, _ = kube.list(PODS, None, fieldSelector=f"spec.nodeName={node.name}")
        found[node.name] = [node_pod(item) for item in items]
    return found


def read_failed_run(kube: KubeJson, job: JobView, namespace: str) -> FailedRun:
    """What a failed Job's pod said: the playbook summary, else the log tail, else the Job's reason."""
    pods, _ = kube.list(PODS, namespace, labelSelector=f"job-name={job.name}")
    for pod in pods:
        summary = summary_of_pod(pod)
        if summary is not None:
            tasks = tuple(
                (failure.task, failure.stderr_tail or failure.message or failure.command)
                for failure in summary.failed_tasks
            )
            first = summary.failed_tasks[0] if summary.failed_tasks else None
            line = f"task {first.task!r}: {first.stderr_tail or first.message}" if first else summary.status
            return FailedRun(summary=line.strip()[:500], tasks=tasks)
        tail = log_tail_of_pod(pod)
        if tail:
            return FailedRun(summary=tail.strip().splitlines()[-1][:500], tasks=(("(log)", tail[-400:]),))
    return FailedRun(summary=job.message or job.reason)


class DriverWriter:
    def __init__(
        self,
        kube: KubeJson,
        settings: JobSettings,
        events: EventRecorder | None,
        count: Callable[[str], None],
        *,
        dry_run: bool = False,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.events = events
        self.count = count  # metrics: one call per write, by kind
        self.dry_run = dry_run

    def apply(self, plan: DriverPlan, driver: DriverConfig) -> bool:
        """Send the plan's Job, pod and Event writes (node patches go through the reconciler)."""
        ok = True
        if self.dry_run:
            log.info("dry run: driver plan", extra={"jobs": len(plan.create_jobs), "evict": len(plan.evict)})
            return True
        namespace = self.settings.namespace
        for job in plan.delete_jobs:
            ok &= self._call("job-delete", partial(self.kube.delete, JOBS, job.name, namespace, uid=job.uid))
        for node, operation, vendor in plan.create_jobs:
            manifest = build_job(self.settings, operation, node, vendor, driver)
            ok &= self._call("job", partial(self.kube.create, JOBS, manifest, namespace), adopt=True)
        policy = driver.upgrade_policy
        grace = (
            policy.pod_deletion_policy if plan.delete_pods else policy.node_drain_policy
        ).grace_period_seconds
        for pod in plan.evict:
            body: JsonObj = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod.name, "namespace": pod.namespace},
            }
            if grace >= 0:
                body["deleteOptions"] = {"gracePeriodSeconds": grace}
            path = PODS.path(pod.namespace, pod.name, "eviction")
            ok &= self._call("eviction", partial(self.kube.call, "POST", path, body=body), refused_ok=True)
        for pod in plan.delete_pods:
            seconds = grace if grace >= 0 else None
            ok &= self._call(
                "pod-delete",
                partial(
                    self.kube.delete, PODS, pod.name, pod.namespace, grace_period_seconds=seconds, uid=pod.uid
                ),
            )
        for event in plan.events:
            if self.events is not None:
                self.events.record(
                    ObjectRef(kind="Node", name=event.node),
                    event.reason,
                    event.message,
                    "Warning" if event.warning else "Normal",
                )
        return ok

    def _call(
        self, kind: str, send: Callable[[], Any], *, adopt: bool = False, refused_ok: bool = False
    ) -> bool:
        self.count(kind)
        try:
            send()
        except ApiException as exc:
            if exc.status == 404 or (adopt and exc.status == 409):
                return True  # gone already / already there (a restarted operator adopts it)
            if refused_ok and is_status(exc, 429):
                return True  # a PodDisruptionBudget says not now: the drain asks again
            log.warning(
                "driver write failed", extra={"kind": kind, "error": f"HTTP {exc.status} {exc.reason}"}
            )
            return False
        return True
