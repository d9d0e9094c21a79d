"""The kubelet's side of the Node object: Ready condition, addresses, device-plugin resources.

Once a simulated kubelet is up it reports Ready and takes the `node.kubernetes.io/not-ready` taint off
(the node lifecycle controller's job in a real cluster). Extended resources (`amd.com/gpu`, ...) come
from the node's kubelet emulator and are merged into `status.capacity`/`allocatable`, removed when a
plugin goes away, exactly what the scheduler and `kubectl describe node` read.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from gpuop_common.kubeobj import is_extended

from gpuop_sim.workloads.kubeapi import JSON_PATCH, NODES, STRATEGIC_MERGE_PATCH, KubeRest, is_status
from gpuop_sim.workloads.objects import Obj, spec_of, status_of
from gpuop_sim.workloads.scheduling import NOT_READY_TAINT
from gpuop_sim.workloads.simkubelet.status import node_ready_conditions

log = logging.getLogger(__name__)


def resource_patch(node: Obj, capacity: Mapping[str, int], allocatable: Mapping[str, int]) -> Obj | None:
    """Merge patch for status.capacity/allocatable, or None when the node already shows this."""
    status = status_of(node)
    old_cap = {k: v for k, v in (status.get("capacity") or {}).items() if is_extended(k)}
    old_alloc = {k: v for k, v in (status.get("allocatable") or {}).items() if is_extended(k)}
    new_cap = {k: str(v) for k, v in capacity.items()}
    new_alloc = {k: str(allocatable.get(k, 0)) for k in capacity}
    if old_cap == new_cap and old_alloc == new_alloc:
        return None
    cap_patch: dict[str, str | None] = {k: None for k in old_cap if k not in new_cap}
    alloc_patch: dict[str, str | None] = {k: None for k in old_alloc if k not in new_alloc}
    cap_patch.update(new_cap)
    alloc_patch.update(new_alloc)
    return {"status": {"capacity": cap_patch, "allocatable": alloc_patch}}


def without_not_ready_taint(node: Obj) -> list[Obj] | None:
    """The node's taints minus not-ready, or None when there is nothing to remove."""
    taints = list(spec_of(node).get("taints") or [])
    kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
    return None if len(kept) == len(taints) else kept


def mark_ready(rest: KubeRest, node_name: str, address: str, now: str) -> None:
    """Post Ready conditions and addresses, then drop the not-ready taint (retrying on races)."""
    status = {
        "conditions": node_ready_conditions(now),
        "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": node_name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
    }
    # Strategic merge, as the kubelet patches: conditions merge by type, so others' (GPUHealthy) stay.
    rest.patch(NODES, node_name, {"status": status}, sub="status", content_type=STRATEGIC_MERGE_PATCH)
    for _attempt in range(10):
        node = rest.get(NODES, node_name)
        kept = without_not_ready_taint(node)
        if kept is None:
            return
        # test+replace: a concurrent taint change (an operator's) makes this fail and we re-read.
        patch: list[Obj] = [{"op": "test", "path": "/spec/taints", "value": spec_of(node).get("taints")}]
        patch.append(
            {"op": "replace", "path": "/spec/taints", "value": kept}
            if kept
            else {"op": "remove", "path": "/spec/taints"}
        )
        try:
            rest.patch(NODES, node_name, patch, content_type=JSON_PATCH)
            return
        except Exception as error:
            if not is_status(error, 409, 422):
                raise
    log.warning("node %s: could not remove the not-ready taint after 10 attempts", node_name)


def mark_not_ready(rest: KubeRest, node_name: str, now: str, message: str) -> None:
    """The node went down: Ready False (KubeletNotReady) and, as the node lifecycle controller does
    for a not-ready node, the `node.kubernetes.io/not-ready:NoSchedule` taint (mark_ready lifts it)."""
    conditions = node_ready_conditions(now)
    for cond in conditions:
        if cond["type"] == "Ready":
            cond.update(status="False", reason="KubeletNotReady", message=message)
    rest.patch(
        NODES,
        node_name,
        {"status": {"conditions": conditions}},
        sub="status",
        content_type=STRATEGIC_MERGE_PATCH,
    )
    for _attempt in range(10):
        node = rest.get(NODES, node_name)
        taints = list(spec_of(node).get("taints") or [])
        if any(t.get("key") == NOT_READY_TAINT for t in taints):
            return
        taint = {"key": NOT_READY_TAINT, "effect": "NoSchedule", "timeAdded": now}
        current = spec_of(node).get("taints")
        patch: list[Obj] = (
            [{"op": "add", "path": "/spec/taints", "value": [taint]}]
            if current is None
            else [
                {"op": "test", "path": "/spec/taints", "value": current},
                {"op": "replace", "path": "/spec/taints", "value": [*taints, taint]},
            ]
        )
        try:
            rest.patch(NODES, node_name, patch, content_type=JSON_PATCH)
            return
        except Exception as error:
            if not is_status(error, 409, 422):
                raise
    log.warning("node %s: could not add the not-ready taint after 10 attempts", node_name)


def set_boot_id(rest: KubeRest, node_name: str, boot_id: str) -> None:
    """What a kubelet reports after a boot: the kernel's new boot id in status.nodeInfo."""
    rest.patch(NODES, node_name, {"status": {"nodeInfo": {"bootID": boot_id}}}, sub="status")


def publish_resources(
    rest: KubeRest, node_name: str, capacity: Mapping[str, int], allocatable: Mapping[str, int]
) -> None:
    node = rest.get(NODES, node_name)
    patch = resource_patch(node, capacity, allocatable)
    if patch is not None:
        rest.patch(NODES, node_name, patch, sub="status")
