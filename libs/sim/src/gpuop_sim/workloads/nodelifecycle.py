"""The node lifecycle controller's health check: nodes whose kubelet stops beating go Unknown.

As kube-controller-manager does it: every node-monitor period it reads each node's heartbeats (its
Lease's renewTime and its Ready condition's lastHeartbeatTime) and notes, on its own clock, when one
last changed; a node silent for longer than the grace period (`--node-monitor-grace-period`, 50 s by
default) gets every kubelet condition set to Unknown ("Kubelet stopped posting node status.") and the
`node.kubernetes.io/unreachable` taints, NoSchedule and NoExecute. The taints go once Ready is back.
Comparing the controller's own clock, never the timestamps with it, is what makes clock skew between
kubelets and the controller harmless, here as there.

Its pods' Ready condition goes False then too. Not simulated: evicting them when their unreachable
toleration (300 s by default) runs out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuop_sim.workloads.objects import Obj, spec_of, status_of
from gpuop_sim.workloads.scheduling import UNREACHABLE_TAINT

NODE_MONITOR_PERIOD = 5.0
NODE_MONITOR_GRACE_PERIOD = 50.0
KUBELET_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."


def ready_status(node: Obj) -> str:
    for cond in status_of(node).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status") or "Unknown")
    return "Unknown"


def heartbeat_of(node: Obj, lease: Obj | None) -> tuple[str, str]:
    """What changes whenever the kubelet is alive: its Ready heartbeat time and its Lease renewal."""
    conditions: list[Obj] = status_of(node).get("conditions") or []
    ready: Obj = next((c for c in conditions if c.get("type") == "Ready"), {})
    renew = str(spec_of(lease).get("renewTime") or "") if lease else ""
    return str(ready.get("lastHeartbeatTime") or ""), renew


@dataclass
class HeartbeatClock:
    """When (controller's monotonic clock) each node's heartbeat was last seen to change."""

    seen: dict[str, tuple[tuple[str, str], float]]

    def observe(self, name: str, beat: tuple[str, str], now: float) -> float:
        last = self.seen.get(name)
        if last is None or last[0] != beat:
            self.seen[name] = (beat, now)
            return now
        return last[1]

    def forget_except(self, names: set[str]) -> None:
        for name in [n for n in self.seen if n not in names]:
            del self.seen[name]


def unknown_conditions(node: Obj, now: str) -> list[Obj] | None:
    """The kubelet conditions set to Unknown (each kept as it was otherwise), or None if already so."""
    conditions = {c.get("type"): c for c in status_of(node).get("conditions") or []}
    if all(conditions.get(kind, {}).get("status") == "Unknown" for kind in KUBELET_CONDITIONS):
        return None
    out = []
    for kind in KUBELET_CONDITIONS:
        cond: Obj = dict(conditions.get(kind) or {"type": kind, "lastHeartbeatTime": now})
        if cond.get("status") != "Unknown":
            cond["lastTransitionTime"] = now
        cond.update(status="Unknown", reason="NodeStatusUnknown", message=UNKNOWN_MESSAGE)
        out.append(cond)
    return out


def wanted_taints(node: Obj, now: str) -> list[Obj] | None:
    """The node's taints with the unreachable pair present exactly while Ready is Unknown; None when
    they already are as they should be."""
    taints = list(spec_of(node).get("taints") or [])
    others = [t for t in taints if t.get("key") != UNREACHABLE_TAINT]
    if ready_status(node) != "Unknown":
        return None if len(others) == len(taints) else others
    present = {t.get("effect") for t in taints if t.get("key") == UNREACHABLE_TAINT}
    if present >= {"NoSchedule", "NoExecute"}:
        return None
    added = [
        {"key": UNREACHABLE_TAINT, "effect": effect, "timeAdded": now}
        for effect in ("NoSchedule", "NoExecute")
        if effect not in present
    ]
    return [*taints, *added]


def silent_nodes(
    nodes: Mapping[str, Obj], leases: Mapping[str, Obj], clock: HeartbeatClock, now: float, grace: float
) -> list[str]:
    """The nodes not heard from for longer than `grace` (their heartbeats noted in `clock`)."""
    clock.forget_except(set(nodes))
    return [
        name
        for name, node in nodes.items()
        if now - clock.observe(name, heartbeat_of(node, leases.get(name)), now) > grace
    ]


def pod_not_ready_patch(pod: Obj, now: str) -> Obj | None:
    """Strategic merge patch setting the pod's Ready condition False, or None when it is not True.
    Conditions merge by type, so the other conditions stay as the kubelet wrote them."""
    conditions: list[Obj] = status_of(pod).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return None
    return {"status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}]}}
