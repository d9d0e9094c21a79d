"""ControllerManager: the simulator's kube-controller-manager + kube-scheduler, over HTTP.

Informers cache nodes, pods and the workload kinds; each controller has its own work queue and
reconciles one object at a time from the caches (level-triggered), writing through the real
`kubernetes` client. A periodic resync re-enqueues everything so a lost event only delays work.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime

from gpuop_sim.workloads.daemonset import build_daemon_pod, plan_daemonset, status_changed
from gpuop_sim.workloads.deployment import (
    build_replica_pod,
    plan_deployment,
    plan_replicaset,
)
from gpuop_sim.workloads.informer import Informer, WorkQueue
from gpuop_sim.workloads.job import build_job_pod, plan_job
from gpuop_sim.workloads.kubeapi import (
    DAEMONSETS,
    DEPLOYMENTS,
    JOBS,
    JSON_PATCH,
    LEASES,
    NODES,
    PODS,
    REPLICASETS,
    STRATEGIC_MERGE_PATCH,
    KubeRest,
    Resource,
    is_status,
)
from gpuop_sim.workloads.nodelifecycle import (
    NODE_MONITOR_GRACE_PERIOD,
    NODE_MONITOR_PERIOD,
    HeartbeatClock,
    pod_not_ready_patch,
    silent_nodes,
    unknown_conditions,
    wanted_taints,
)
from gpuop_sim.workloads.objects import (
    Obj,
    controller_uid,
    is_deleting,
    key_of,
    meta,
    name_of,
    namespace_of,
    spec_of,
    status_of,
)
from gpuop_sim.workloads.scheduler import needs_scheduling, plan_bindings

log = logging.getLogger(__name__)

_SCHEDULER_KEY = "pending-pods"


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _owner_key(obj: Obj) -> tuple[str | None, str]:
    """(kind, namespace/name) of the object's controlling owner."""
    for ref in meta(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("kind")), f"{namespace_of(obj)}/{ref.get('name')}"
    return None, ""


class ControllerManager:
    """DaemonSet, Deployment, ReplicaSet and Job controllers plus a scheduler, in daemon threads."""

    def __init__(
        self,
        rest: KubeRest,
        *,
        resync_seconds: float = 5.0,
        node_monitor_grace_period: float = NODE_MONITOR_GRACE_PERIOD,
    ) -> None:
        self.rest = rest
        self._resync_seconds = resync_seconds
        self._node_grace = node_monitor_grace_period
        self._heartbeats = HeartbeatClock({})
        self.informers: dict[str, Informer] = {
            r.plural: Informer(rest, r) for r in (NODES, PODS, DAEMONSETS, DEPLOYMENTS, REPLICASETS, JOBS)
        }
        self.queues = {
            "daemonsets": WorkQueue("daemonset-controller", self._reconcile_daemonset),
            "deployments": WorkQueue("deployment-controller", self._reconcile_deployment),
            "replicasets": WorkQueue("replicaset-controller", self._reconcile_replicaset),
            "jobs": WorkQueue("job-controller", self._reconcile_job),
            "scheduler": WorkQueue("scheduler", lambda _key: self._schedule()),
        }
        self._stop = threading.Event()
        self._resync = threading.Thread(target=self._resync_loop, name="controller-resync", daemon=True)
        self._node_monitor = threading.Thread(target=self._monitor_nodes, name="node-lifecycle", daemon=True)

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self, timeout: float = 15.0) -> None:
        self.informers["nodes"].add_handler(self._on_node)
        self.informers["pods"].add_handler(self._on_pod)
        self.informers["daemonsets"].add_handler(lambda _t, o: self.queues["daemonsets"].add(key_of(o)))
        self.informers["deployments"].add_handler(lambda _t, o: self.queues["deployments"].add(key_of(o)))
        self.informers["replicasets"].add_handler(self._on_replicaset)
        self.informers["jobs"].add_handler(lambda _t, o: self.queues["jobs"].add(key_of(o)))
        for informer in self.informers.values():
            informer.start()
        for plural, informer in self.informers.items():
            if not informer.wait_synced(timeout):
                raise TimeoutError(f"controller cache for {plural} did not sync within {timeout}s")
        for queue in self.queues.values():
            queue.start()
        self._resync.start()
        self._node_monitor.start()

    def stop(self) -> None:
        self._stop.set()
        for queue in self.queues.values():
            queue.stop()
        for informer in self.informers.values():
            informer.stop()

    def idle(self) -> bool:
        return all(q.idle() for q in self.queues.values())

    def _resync_loop(self) -> None:
        while not self._stop.wait(self._resync_seconds):
            self._enqueue_all()

    def _enqueue_all(self) -> None:
        for plural in ("daemonsets", "deployments", "replicasets", "jobs"):
            for obj in self.informers[plural].items():
                self.queues[plural].add(key_of(obj))
        self.queues["scheduler"].add(_SCHEDULER_KEY)

    # -- node lifecycle --------------------------------------------------------------------------
    def _monitor_nodes(self) -> None:
        while not self._stop.wait(NODE_MONITOR_PERIOD):
            try:
                self._check_node_health()
            except Exception as error:  # the next period tries again, as the real controller does
                log.warning("node lifecycle: health check failed (%s)", error)

    def _check_node_health(self) -> None:
        nodes = {name_of(n): n for n in self.informers["nodes"].items()}
        leases = {name_of(lease): lease for lease in self.rest.list(LEASES, "kube-node-lease")[0]}
        now = utc_now()
        for name in silent_nodes(nodes, leases, self._heartbeats, time.monotonic(), self._node_grace):
            conditions = unknown_conditions(nodes[name], now)
            if conditions is not None:
                log.info("node %s: kubelet stopped posting node status; marking it Unknown", name)
                patch = {"status": {"conditions": conditions}}
                self.rest.patch(NODES, name, patch, sub="status", content_type=STRATEGIC_MERGE_PATCH)
                self._mark_pods_not_ready(name, now)
        for node in self.informers["nodes"].items():
            self._taint_unreachable(node, now)

    def _mark_pods_not_ready(self, node_name: str, now: str) -> None:
        """As the real controller does when a node stops being Ready: its pods' Ready condition goes
        False (nobody can vouch for them), so Services and DaemonSet counts stop trusting them."""
        for pod in self.informers["pods"].items():
            if spec_of(pod).get("nodeName") != node_name:
                continue
            patch = pod_not_ready_patch(pod, now)
            if patch is None:
                continue
            try:
                self.rest.patch(
                    PODS,
                    name_of(pod),
                    patch,
                    namespace_of(pod),
                    sub="status",
                    content_type=STRATEGIC_MERGE_PATCH,
                )
            except Exception as error:
                if not is_status(error, 404):
                    raise

    def _taint_unreachable(self, node: Obj, now: str) -> None:
        taints = wanted_taints(node, now)
        if taints is None:
            return
        # test+replace: a concurrent taint change fails the patch and the next period re-reads.
        patch: list[Obj] = [{"op": "test", "path": "/spec/taints", "value": spec_of(node).get("taints")}]
        patch.append({"op": "replace", "path": "/spec/taints", "value": taints})
        if spec_of(node).get("taints") is None:
            patch = [{"op": "add", "path": "/spec/taints", "value": taints}]
        try:
            self.rest.patch(NODES, name_of(node), patch, content_type=JSON_PATCH)
        except Exception as error:
            if not is_status(error, 404, 409, 422):
                raise

    # -- event routing ---------------------------------------------------------------------------
    def _on_node(self, _event: str, _node: Obj) -> None:
        for ds in self.informers["daemonsets"].items():
            self.queues["daemonsets"].add(key_of(ds))
        self.queues["scheduler"].add(_SCHEDULER_KEY)

    def _on_pod(self, event: str, pod: Obj) -> None:
        kind, owner = _owner_key(pod)
        queue = {"DaemonSet": "daemonsets", "ReplicaSet": "replicasets", "Job": "jobs"}.get(kind or "")
        if queue:
            self.queues[queue].add(owner)
        if (
            needs_scheduling(pod)
            or event == "DELETED"
            or status_of(pod).get("phase") in ("Succeeded", "Failed")
        ):
            self.queues["scheduler"].add(_SCHEDULER_KEY)

    def _on_replicaset(self, _event: str, rs: Obj) -> None:
        self.queues["replicasets"].add(key_of(rs))
        kind, owner = _owner_key(rs)
        if kind == "Deployment":
            self.queues["deployments"].add(owner)

    # -- helpers ---------------------------------------------------------------------------------
    def _pods_in(self, namespace: str) -> list[Obj]:
        return [p for p in self.informers["pods"].items() if namespace_of(p) == namespace]

    def _create(self, resource: Resource, body: Obj, cache: str) -> None:
        try:
            created = self.rest.create(resource, body, namespace_of(body))
        except Exception as error:
            if is_status(error, 409):
                return
            raise
        created.setdefault("kind", resource.kind)
        created.setdefault("apiVersion", resource.group_version)
        self.informers[cache].upsert(created)

    def _delete(self, resource: Resource, obj: Obj) -> None:
        try:
            self.rest.delete(resource, name_of(obj), namespace_of(obj), uid=meta(obj).get("uid"))
        except Exception as error:
            if not is_status(error, 404, 409):
                raise

    def _patch_status(self, resource: Resource, obj: Obj, status: Obj) -> None:
        try:
            self.rest.patch(resource, name_of(obj), {"status": status}, namespace_of(obj), sub="status")
        except Exception as error:
            if not is_status(error, 404):
                raise

    # -- controllers -----------------------------------------------------------------------------
    def _reconcile_daemonset(self, key: str) -> None:
        ds = self.informers["daemonsets"].get(key)
        if ds is None or is_deleting(ds):
            return
        plan = plan_daemonset(ds, self.informers["nodes"].items(), self._pods_in(namespace_of(ds)))
        for pod in plan.delete:
            self._delete(PODS, pod)
        for node_name in plan.create_on:
            self._create_daemon_pod(ds, node_name)
        if status_changed(ds, plan.status):
            self._patch_status(DAEMONSETS, ds, plan.status)

    def _create_daemon_pod(self, ds: Obj, node_name: str) -> None:
        pod = build_daemon_pod(ds, node_name)
        try:
            created = self.rest.create(PODS, pod, namespace_of(ds))
        except Exception as error:
            if not is_status(error, 409):
                raise
            existing = self.rest.get(PODS, name_of(pod), namespace_of(ds))
            if (
                controller_uid(existing) == meta(ds).get("uid")
                and spec_of(existing).get("nodeName") == node_name
            ):
                created = existing  # ours, the cache had not seen it yet
            else:
                # Another pod holds the name (two node names share a hash prefix): let the server pick.
                meta(pod).pop("name")
                meta(pod)["generateName"] = f"{name_of(ds)[:57]}-"
                created = self.rest.create(PODS, pod, namespace_of(ds))
        created.setdefault("kind", "Pod")
        created.setdefault("apiVersion", "v1")
        self.informers["pods"].upsert(created)

    def _reconcile_deployment(self, key: str) -> None:
        deployment = self.informers["deployments"].get(key)
        if deployment is None or is_deleting(deployment):
            return
        replicasets = [
            rs for rs in self.informers["replicasets"].items() if namespace_of(rs) == namespace_of(deployment)
        ]
        plan = plan_deployment(deployment, replicasets)
        for rs in plan.create:
            self._create(REPLICASETS, rs, "replicasets")
        for rs, replicas in plan.scale:
            self.rest.patch(REPLICASETS, name_of(rs), {"spec": {"replicas": replicas}}, namespace_of(rs))
        if status_changed(deployment, {k: v for k, v in plan.status.items() if k != "conditions"}):
            self._patch_status(DEPLOYMENTS, deployment, plan.status)

    def _reconcile_replicaset(self, key: str) -> None:
        rs = self.informers["replicasets"].get(key)
        if rs is None or is_deleting(rs):
            return
        plan = plan_replicaset(rs, self._pods_in(namespace_of(rs)))
        for pod in plan.delete:
            self._delete(PODS, pod)
        for _ in range(plan.create):
            self._create(PODS, build_replica_pod(rs), "pods")
        if status_changed(rs, plan.status):
            self._patch_status(REPLICASETS, rs, plan.status)

    def _reconcile_job(self, key: str) -> None:
        job = self.informers["jobs"].get(key)
        if job is None or is_deleting(job):
            return
        now = utc_now()
        plan = plan_job(job, self._pods_in(namespace_of(job)), now)
        if plan.delete_job:
            self._delete_finished_job(job)
            return
        for pod in plan.delete:
            self._delete(PODS, pod)
            # Seen as terminating from now on, so a reconcile before the watch event counts it once.
            self.informers["pods"].upsert(
                dict(
                    pod, metadata=dict(meta(pod), deletionTimestamp=meta(pod).get("deletionTimestamp") or now)
                )
            )
        for _ in range(plan.create):
            self._create(PODS, build_job_pod(job), "pods")
        old = status_of(job)
        counts = ("active", "succeeded", "failed", "ready", "terminating")
        if (
            any(old.get(k, 0) != plan.status.get(k, 0) for k in counts)
            or len(old.get("conditions") or []) != len(plan.status.get("conditions") or [])
            or not old.get("startTime")
        ):
            self._patch_job_status(job, plan.status)
        if plan.requeue_after is not None:
            self.queues["jobs"].add_after(key, plan.requeue_after)

    def _patch_job_status(self, job: Obj, status: Obj) -> None:
        try:
            updated = self.rest.patch(JOBS, name_of(job), {"status": status}, namespace_of(job), sub="status")
        except Exception as error:
            if not is_status(error, 404):
                raise
            return
        # Our own write in the cache now: a reconcile before its watch event adds no condition twice.
        updated.setdefault("kind", JOBS.kind)
        updated.setdefault("apiVersion", JOBS.group_version)
        self.informers["jobs"].upsert(updated)

    def _delete_finished_job(self, job: Obj) -> None:
        """The TTL-after-finished controller: foreground deletion, so the pods go before the Job."""
        body = {
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "propagationPolicy": "Foreground",
            "preconditions": {"uid": meta(job).get("uid")},
        }
        try:
            self.rest.call("DELETE", JOBS.path(namespace_of(job), name_of(job)), body=body)
        except Exception as error:
            if not is_status(error, 404, 409):
                raise

    def _schedule(self) -> None:
        pods = self.informers["pods"].items()
        pending = [p for p in pods if needs_scheduling(p)]
        if not pending:
            return
        for decision in plan_bindings(pending, self.informers["nodes"].items(), pods):
            pod = decision.pod
            if decision.node is not None:
                try:
                    self.rest.bind(pod, decision.node)
                except Exception as error:
                    if not is_status(error, 404, 409):
                        raise
                    continue
                bound = dict(pod, spec=dict(spec_of(pod), nodeName=decision.node))
                self.informers["pods"].upsert(bound)
                continue
            self._mark_unschedulable(pod, decision.reason)

    def _mark_unschedulable(self, pod: Obj, reason: str) -> None:
        for cond in status_of(pod).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("message") == reason:
                return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": reason,
            "lastTransitionTime": utc_now(),
        }
        self._patch_status(PODS, pod, {"phase": "Pending", "conditions": [condition]})
