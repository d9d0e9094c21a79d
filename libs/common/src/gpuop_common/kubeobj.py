"""Small, pure accessors over Kubernetes objects held as plain JSON dicts.

The simulator's controllers and `kubectl gpuop` both work on the JSON the API server returns (no
generated models): it is what the wire carries, it is cheap at 1,000 nodes and it keeps fields we do
not model. A missing or mistyped field reads as empty, never raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


def meta(obj: Obj) -> Obj:
    value = obj.get("metadata")
    return value if isinstance(value, dict) else {}


def name_of(obj: Obj) -> str:
    return str(meta(obj).get("name", ""))


def namespace_of(obj: Obj) -> str:
    return str(meta(obj).get("namespace") or "")


def key_of(obj: Obj) -> str:
    """`namespace/name` for namespaced objects, `name` for cluster-scoped ones."""
    ns = namespace_of(obj)
    return f"{ns}/{name_of(obj)}" if ns else name_of(obj)


def labels_of(obj: Obj) -> dict[str, str]:
    value = meta(obj).get("labels")
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def annotations_of(obj: Obj) -> dict[str, str]:
    value = meta(obj).get("annotations")
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def spec_of(obj: Obj) -> Obj:
    value = obj.get("spec")
    return value if isinstance(value, dict) else {}


def status_of(obj: Obj) -> Obj:
    value = obj.get("status")
    return value if isinstance(value, dict) else {}


def pod_phase(pod: Obj) -> str:
    return str(status_of(pod).get("phase") or "Pending")


def condition_of(obj: Obj, kind: str) -> Obj | None:
    """The `status.conditions` entry of this type, None when there is none."""
    for cond in status_of(obj).get("conditions") or []:
        if isinstance(cond, dict) and cond.get("type") == kind:
            return cond
    return None


def pod_is_ready(pod: Obj) -> bool:
    cond = condition_of(pod, "Ready")
    return cond is not None and cond.get("status") == "True"


# Waiting reasons of a container whose image the node cannot pull (kubelet images.Err*). A kubelet
# never fails a pod for these: it stays Pending and the pull is retried with a back-off (10 s doubling
# to 300 s), so a Job with such a pod is never Failed by its backoffLimit; whoever waits on the pod
# must read these reasons itself.
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"})


@dataclass(frozen=True)
class PullFailure:
    """A container of a pod waiting on an image the node cannot pull."""

    container: str
    image: str
    reason: str  # one of IMAGE_PULL_REASONS
    message: str  # the kubelet's: `Failed to pull image "<image>": ...`, `Back-off pulling image ...`


def image_pull_failure(pod: Obj) -> PullFailure | None:
    """The first container (init containers first) whose image cannot be pulled, None when none."""
    status = status_of(pod)
    for entry in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        if not isinstance(entry, dict):
            continue
        waiting = (entry.get("state") or {}).get("waiting") or {}
        reason = str(waiting.get("reason") or "")
        if reason in IMAGE_PULL_REASONS:
            return PullFailure(
                str(entry.get("name") or ""),
                str(entry.get("image") or ""),
                reason,
                str(waiting.get("message") or ""),
            )
    return None


def node_is_ready(node: Obj) -> bool:
    cond = condition_of(node, "Ready")
    return cond is not None and cond.get("status") == "True"


# Resources the kubelet itself reports; everything else with a `/` is a device plugin's.
_NATIVE_RESOURCES = ("cpu", "memory", "pods", "ephemeral-storage", "hugepages-")


def is_extended(resource: str) -> bool:
    """An extended resource (`amd.com/gpu`), which only a device plugin puts in allocatable."""
    return "/" in resource and not resource.startswith(_NATIVE_RESOURCES)
