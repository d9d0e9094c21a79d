"""Which pods on the node must be gone before the GPUs are repartitioned (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

GPU_RESOURCE_PREFIXES = ("amd.com/", "nvidia.com/")
NAME_LABEL = "app.kubernetes.io/name"
DONE_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class PodView:
    namespace: str
    name: str
    labels: dict[str, str]
    phase: str
    gpu_resources: tuple[str, ...]  # resource names it requests or limits
    owner_kinds: tuple[str, ...]
    deleting: bool

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def view(pod: Any) -> PodView:
    """A kubernetes V1Pod (or the same shape) reduced to what the decision needs."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    resources: set[str] = set()
    for container in list(spec.containers or []) + list(spec.init_containers or []):
        res = container.resources
        for table in (res.limits, res.requests) if res is not None else ():
            resources |= {k for k in (table or {}) if k.startswith(GPU_RESOURCE_PREFIXES)}
    return PodView(
        namespace=meta.namespace or "",
        name=meta.name or "",
        labels=dict(meta.labels or {}),
        phase=(status.phase if status is not None else None) or "Pending",
        gpu_resources=tuple(sorted(resources)),
        owner_kinds=tuple(o.kind for o in meta.owner_references or ()),
        deleting=meta.deletion_timestamp is not None,
    )


def blocking(pods: Sequence[PodView], operands: Sequence[str]) -> list[PodView]:
    """Running operand pods (by chart name) and every pod holding GPUs, sorted by reference."""
    result = [
        p
        for p in pods
        if p.phase not in DONE_PHASES and (p.labels.get(NAME_LABEL) in operands or p.gpu_resources)
    ]
    return sorted(result, key=lambda p: p.ref)


def evictable(pods: Sequence[PodView]) -> list[PodView]:
    """GPU workload pods a drain may delete: not DaemonSet pods (their controller re-creates them)."""
    return [p for p in pods if p.gpu_resources and "DaemonSet" not in p.owner_kinds and not p.deleting]
