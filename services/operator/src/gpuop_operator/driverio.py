"""The driver lifecycle's API edge: read what `driverflow` needs, send what it planned.

Reads: the pods on nodes being drained (one list per such node and pass), and once per failed Job
the termination message of its pod (the playbook summary: which task failed and its stderr).
Writes: Job creates (409 = the Job is already there: adopted) and deletes (uid precondition), pod
evictions (429 = a PodDisruptionBudget refuses for now: tried again next pass) or deletions, and
Events on the Node.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any

from gpuop_common.config.driver import DriverConfig
from gpuop_common.kube import EventRecorder, ObjectRef
from gpuop_common.kubejson import JOBS, is_status
from gpuop_common.kubeobj import image_pull_failure
from kubernetes.client.exceptions import ApiException

from gpuop_operator.drain import ControlPods, NodePod, node_pod
from gpuop_operator.driverflow import DriverPlan, FailedRun, NodeEvent
from gpuop_operator.driverjob import JobSettings, JobView, build_job, log_tail_of_pod, summary_of_pod
from gpuop_operator.kubeio import PODS, KubeJson
from gpuop_operator.upgrade import STATE_LABEL, UpgradeState

log = logging.getLogger(__name__)
JsonObj = dict[str, Any]


def pods_to_drain(
    kube: KubeJson,
    nodes: Iterable[Any],
    label: str = STATE_LABEL,
    state: str = UpgradeState.DRAINING.value,
    control: ControlPods | None = None,
) -> dict[str, list[NodePod]]:
    """Every pod on each node whose `label` (the driver upgrade's state, or remediation's) says `state`."""
    found: dict[str, list[NodePod]] = {}
    for node in nodes:
        if node.labels.get(label) != state:
            continue
        items, _ = kube.list(PODS, None, fieldSelector=f"spec.nodeName={node.name}")
        found[node.name] = [node_pod(item, control) for item in items]
    return found


def read_failed_run(kube: KubeJson, job: JobView, namespace: str) -> FailedRun:
    """What a finished Job's pod said: the playbook summary, else the log tail, else the Job's reason."""
    pods, _ = kube.list(PODS, namespace, labelSelector=f"job-name={job.name}")
    for pod in pods:
        owners = {ref.get("uid") for ref in (pod.get("metadata") or {}).get("ownerReferences") or []}
        if owners and job.uid not in owners:
            continue  # a pod of an older Job of that name, not collected yet
        pull = image_pull_failure(pod)
        if pull is not None:  # its deadline ended a Job whose pod never got its image
            line = f"image {pull.image!r} was never pulled ({pull.reason}: {pull.message})"
            return FailedRun(summary=line[:500])
        summary = summary_of_pod(pod)
        if summary is not None:
            tasks = tuple(
                (failure.task, failure.stderr_tail or failure.message or failure.command)
                for failure in summary.failed_tasks
            )
            first = summary.failed_tasks[0] if summary.failed_tasks else None
            line = f"task {first.task!r}: {first.stderr_tail or first.message}" if first else summary.status
            return FailedRun(summary=line.strip()[:500], tasks=tasks, facts=dict(summary.facts))
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
        policy = driver.upgrade_policy
        grace = (
            policy.pod_deletion_policy if plan.delete_pods else policy.node_drain_policy
        ).grace_period_seconds
        # Each Job carries its concrete version: what it installs is what the node is labelled after.
        manifests = [
            build_job(
                self.settings,
                job.operation,
                job.node,
                job.vendor,
                driver.model_copy(update={"version": job.version}),
            )
            for job in plan.create_jobs
        ]
        return self.send(manifests, plan.delete_jobs, plan.evict, plan.delete_pods, plan.events, grace=grace)

    def send(
        self,
        jobs: Sequence[JsonObj],
        delete_jobs: Sequence[JobView],
        evict: Sequence[NodePod],
        delete_pods: Sequence[NodePod],
        events: Sequence[NodeEvent],
        *,
        grace: int,
    ) -> bool:
        """Job deletes and creates, evictions (`grace`: seconds, -1 the pods' own), pod deletes and
        Events; shared by the driver lifecycle and remediation."""
        ok = True
        if self.dry_run:
            log.info("dry run: Job and pod writes", extra={"jobs": len(jobs), "evict": len(evict)})
            return True
        namespace = self.settings.namespace
        for job in delete_jobs:
            ok &= self._call("job-delete", partial(self.kube.delete, JOBS, job.name, namespace, uid=job.uid))
        for manifest in jobs:
            ok &= self._call("job", partial(self.kube.create, JOBS, manifest, namespace), adopt=True)
        for pod in evict:
            body: JsonObj = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": pod.name, "namespace": pod.namespace},
            }
            if grace >= 0:
                body["deleteOptions"] = {"gracePeriodSeconds": grace}
            path = PODS.path(pod.namespace, pod.name, "eviction")
            ok &= self._call("eviction", partial(self.kube.call, "POST", path, body=body), refused_ok=True)
        for pod in delete_pods:
            seconds = grace if grace >= 0 else None
            ok &= self._call(
                "pod-delete",
                partial(
                    self.kube.delete, PODS, pod.name, pod.namespace, grace_period_seconds=seconds, uid=pod.uid
                ),
            )
        for event in events:
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
