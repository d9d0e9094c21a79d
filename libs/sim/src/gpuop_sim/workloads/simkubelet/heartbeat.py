"""The kubelet's liveness signals to the control plane: its node Lease and periodic node status.

A real kubelet renews `kube-node-lease/<node>` every 10 s (a quarter of the 40 s lease) and, with
leases, re-posts an unchanged node status every 5 min (nodeStatusReportFrequency). The node lifecycle
controller treats either as a heartbeat; without them it marks the node Unknown and taints it
`node.kubernetes.io/unreachable` once its grace period passes. One thread serves every node here, so
a thousand stub nodes cost one thread, not a thousand.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

from gpuop_sim.workloads.kubeapi import LEASES, NODES, STRATEGIC_MERGE_PATCH, KubeRest, is_status
from gpuop_sim.workloads.objects import Obj, meta

log = logging.getLogger(__name__)

NODE_LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_SECONDS = 40
RENEW_INTERVAL = LEASE_DURATION_SECONDS / 4
NODE_STATUS_REPORT_SECONDS = 300.0


def micro_time(now: datetime) -> str:
    """A Lease's renewTime: RFC 3339 with microseconds (metav1.MicroTime)."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_lease(node: Obj, now: datetime) -> Obj:
    """The Lease a kubelet keeps for its node, owned by the Node so it goes when the Node goes."""
    name = str(meta(node).get("name"))
    owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": meta(node).get("uid")}
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE, "ownerReferences": [owner]},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_DURATION_SECONDS,
            "renewTime": micro_time(now),
        },
    }


def renewed(lease: Obj, now: datetime) -> Obj:
    out = {**lease, "spec": {**(lease.get("spec") or {})}}
    out["spec"]["renewTime"] = micro_time(now)
    out["spec"]["holderIdentity"] = meta(lease).get("name")
    out["spec"]["leaseDurationSeconds"] = LEASE_DURATION_SECONDS
    return out


def heartbeat_patch(now: str) -> Obj:
    """Strategic merge patch that re-posts the node's conditions as seen now: conditions merge by
    type, so only the heartbeat time moves and each condition keeps its status and reason."""
    kinds = ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")
    return {"status": {"conditions": [{"type": kind, "lastHeartbeatTime": now} for kind in kinds]}}


def renew_lease(rest: KubeRest, node_name: str) -> None:
    """Renew (or create) this node's Lease; a lost race is simply retried at the next renewal."""
    now = datetime.now(UTC)
    try:
        current = rest.get(LEASES, node_name, NODE_LEASE_NAMESPACE)
    except Exception as error:
        if not is_status(error, 404):
            raise
        node = rest.get(NODES, node_name)
        rest.create(LEASES, node_lease(node, now), NODE_LEASE_NAMESPACE)
        return
    try:
        rest.replace(LEASES, node_name, renewed(current, now), NODE_LEASE_NAMESPACE)
    except Exception as error:
        if not is_status(error, 409):
            raise


class NodeHeartbeats:
    """Renews every live node's Lease each RENEW_INTERVAL and re-posts its status each
    NODE_STATUS_REPORT_SECONDS; `is_up(node)` false (a rebooting node) sends nothing."""

    def __init__(
        self,
        rest: KubeRest,
        nodes: Iterable[str],
        is_up: Callable[[str], bool],
        *,
        renew_interval: float = RENEW_INTERVAL,
        status_interval: float = NODE_STATUS_REPORT_SECONDS,
    ) -> None:
        self.rest = rest
        self.nodes = list(nodes)
        self._is_up = is_up
        self._renew_interval = renew_interval
        self._status_interval = status_interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="node-heartbeats", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _run(self) -> None:
        next_status = time.monotonic() + self._status_interval
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="node-lease") as pool:
            while True:
                post_status = time.monotonic() >= next_status
                if post_status:
                    next_status = time.monotonic() + self._status_interval
                live = [n for n in self.nodes if self._is_up(n)]
                list(pool.map(self._beat, live, [post_status] * len(live)))
                if self._stop.wait(self._renew_interval):
                    return

    def _beat(self, node_name: str, post_status: bool) -> None:
        try:
            renew_lease(self.rest, node_name)
            if post_status:
                now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                self.rest.patch(
                    NODES, node_name, heartbeat_patch(now), sub="status", content_type=STRATEGIC_MERGE_PATCH
                )
        except Exception as error:
            # The next beat tries again; a kubelet that cannot reach its API server does the same.
            log.warning("node %s: heartbeat failed (%s)", node_name, error)
