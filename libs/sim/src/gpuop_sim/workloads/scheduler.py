"""The scheduler: bind each unscheduled pod to the fitting node that runs the fewest pods."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from gpuop_sim.workloads.objects import Obj, is_deleting, name_of, pod_is_terminal, spec_of
from gpuop_sim.workloads.scheduling import pod_fits_node, pod_requests


@dataclass(frozen=True)
class Decision:
    pod: Obj
    node: str | None  # None: unschedulable for now
    reason: str = ""


def needs_scheduling(pod: Obj) -> bool:
    spec = spec_of(pod)
    return (
        not spec.get("nodeName")
        and not is_deleting(pod)
        and not pod_is_terminal(pod)
        and (spec.get("schedulerName") or "default-scheduler") == "default-scheduler"
    )


def plan_bindings(pending: list[Obj], nodes: list[Obj], pods: list[Obj]) -> list[Decision]:
    """One decision per pending pod; earlier decisions count towards later pods' resources/spread."""
    used: dict[str, dict[str, Decimal]] = {}
    count: dict[str, int] = {name_of(n): 0 for n in nodes}
    for pod in pods:
        node = spec_of(pod).get("nodeName")
        if node and not pod_is_terminal(pod):
            _add(used.setdefault(str(node), {}), pod_requests(spec_of(pod)))
            count[str(node)] = count.get(str(node), 0) + 1
    decisions = []
    for pod in sorted(pending, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or "")):
        spec = spec_of(pod)
        reasons: list[str] = []
        best: str | None = None
        for node in sorted(nodes, key=name_of):
            fit = pod_fits_node(spec, node, used.get(name_of(node), {}))
            if not fit.fits:
                reasons.append(f"{name_of(node)}: {fit.reason}")
            elif best is None or count[name_of(node)] < count[best]:
                best = name_of(node)
        if best is None:
            reason = f"0/{len(nodes)} nodes are available" + (
                f": {'; '.join(reasons[:5])}" if reasons else ""
            )
            decisions.append(Decision(pod, None, reason))
            continue
        _add(used.setdefault(best, {}), pod_requests(spec))
        count[best] += 1
        decisions.append(Decision(pod, best))
    return decisions


def _add(total: dict[str, Decimal], extra: dict[str, Decimal]) -> None:
    for resource, amount in extra.items():
        total[resource] = total.get(resource, Decimal(0)) + amount
