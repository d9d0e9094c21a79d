"""Which pods on the node must be gone before the GPUs are repartitioned (pure).

A pod uses the node's GPUs when it requests a GPU resource of a device plugin, or when it holds an
allocated ResourceClaim with a device of a GPU DRA driver in this node's pool (the DRA drivers
publish one pool per node, named after it): a repartition under either would pull the GPU from
under a running workload.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuop_common.kubelet.assignments import GPU_DRA_DRIVERS, GPU_RESOURCE_PREFIXES
from gpuop_common.kubeobj import IMAGE_PULL_REASONS

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
    gpu_claims: tuple[str, ...] = ()  # ResourceClaims it holds with GPU devices of this node
    # The kubelet's reason when a container cannot pull its image: the pod stays Pending with its
    # GPUs allocated (at admission) and never fails, so it blocks until the timeout; say why.
    pull_reason: str = ""

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def described(self) -> str:
        """`ns/name`, with why it never started when its image cannot be pulled."""
        if self.pull_reason:
            return f"{self.ref} (Pending, {self.pull_reason}: it never starts, delete it or fix its image)"
        return self.ref

    @property
    def uses_gpus(self) -> bool:
        return bool(self.gpu_resources or self.gpu_claims)


def claims_by_pod(
    claims: Iterable[Mapping[str, Any]], node: str, drivers: Iterable[str] = GPU_DRA_DRIVERS
) -> dict[tuple[str, str], tuple[str, ...]]:
    """(namespace, pod) -> names of the claims it holds (`status.reservedFor`) that are allocated
    a device of a GPU DRA driver in this node's pool."""
    wanted = set(drivers)
    held: dict[tuple[str, str], list[str]] = {}
    for claim in claims:
        meta, status = claim.get("metadata") or {}, claim.get("status") or {}
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        if not any(r.get("driver") in wanted and r.get("pool") == node for r in results):
            continue
        namespace = str(meta.get("namespace", ""))
        for consumer in status.get("reservedFor") or []:
            if consumer.get("resource") == "pods" and consumer.get("name"):
                held.setdefault((namespace, str(consumer["name"])), []).append(str(meta.get("name", "")))
    return {key: tuple(sorted(names)) for key, names in held.items()}


def view(pod: Any, claims: Mapping[tuple[str, str], tuple[str, ...]] | None = None) -> PodView:
    """A kubernetes V1Pod (or the same shape) reduced to what the decision needs."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    resources: set[str] = set()
    for container in list(spec.containers or []) + list(spec.init_containers or []):
        res = container.resources
        for table in (res.limits, res.requests) if res is not None else ():
            resources |= {k for k in (table or {}) if k.startswith(GPU_RESOURCE_PREFIXES)}
    namespace, name = meta.namespace or "", meta.name or ""
    return PodView(
        namespace=namespace,
        name=name,
        labels=dict(meta.labels or {}),
        phase=(status.phase if status is not None else None) or "Pending",
        gpu_resources=tuple(sorted(resources)),
        owner_kinds=tuple(o.kind for o in meta.owner_references or ()),
        deleting=meta.deletion_timestamp is not None,
        gpu_claims=(claims or {}).get((namespace, name), ()),
        pull_reason=_pull_reason(status),
    )


def _pull_reason(status: Any) -> str:
    for container in (status.container_statuses if status is not None else None) or []:
        waiting = container.state.waiting if container.state is not None else None
        if waiting is not None and waiting.reason in IMAGE_PULL_REASONS:
            return str(waiting.reason)
    return ""


def blocking(pods: Sequence[PodView], operands: Sequence[str]) -> list[PodView]:
    """Running operand pods (by chart name) and every pod holding GPUs, sorted by reference."""
    result = [
        p
        for p in pods
        if p.phase not in DONE_PHASES and (p.labels.get(NAME_LABEL) in operands or p.uses_gpus)
    ]
    return sorted(result, key=lambda p: p.ref)


def evictable(pods: Sequence[PodView]) -> list[PodView]:
    """GPU workload pods a drain may delete: not DaemonSet pods (their controller re-creates them)."""
    return [p for p in pods if p.uses_gpus and "DaemonSet" not in p.owner_kinds and not p.deleting]
