"""API objects -> the plain data planning works on, and trims of what the caches keep."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import asdict
from datetime import datetime
from typing import Any, Generic, TypeVar

from gpuop_common.kubeobj import PullFailure, image_pull_failure

from gpuop_operator.model import LABEL_PREFIX, NodeCondition, NodeInfo, PodInfo

JsonObj = dict[str, Any]
V = TypeVar("V")
NAME_LABEL = "app.kubernetes.io/name"
JOB_NAME_LABEL = "job-name"  # set by the Job controller on its pods
INSTANCE_LABEL = "app.kubernetes.io/instance"


def _meta(obj: JsonObj, *keys: str) -> JsonObj:
    meta = obj.get("metadata") or {}
    return {key: meta[key] for key in keys if key in meta}


CONDITION_MESSAGE_CHARS = 2048  # the labeller's longest GPUHealthy message: every broken GPU named
# Extended resources that are GPUs or GPU partitions (device plugin names, both vendors).
GPU_RESOURCE_PREFIXES = ("amd.com/", "nvidia.com/")


def trim_node(obj: JsonObj) -> JsonObj:
    """Name, labels (selectors match any of them), only our own annotations, and what the driver
    lifecycle reads: the cordon, Ready, the boot id and the GPUs in allocatable."""
    meta = _meta(obj, "name", "resourceVersion", "labels")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    meta["annotations"] = {k: v for k, v in annotations.items() if k.startswith(LABEL_PREFIX)}
    status = obj.get("status") or {}
    ready = next(
        (c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Ready"), "Unknown"
    )
    allocatable = {
        k: v for k, v in (status.get("allocatable") or {}).items() if k.startswith(GPU_RESOURCE_PREFIXES)
    }
    # Remediation's triggers: every condition but Ready (kept above), the message cut short.
    conditions = [
        {
            "type": c.get("type"),
            "status": c.get("status"),
            "lastTransitionTime": c.get("lastTransitionTime"),
            "reason": str(c.get("reason") or "")[:200],
            "message": str(c.get("message") or "")[:CONDITION_MESSAGE_CHARS],
        }
        for c in status.get("conditions") or []
        if c.get("type") and c.get("type") != "Ready"
    ]
    spec = obj.get("spec") or {}
    return {
        "metadata": meta,
        "spec": {"unschedulable": bool(spec.get("unschedulable")), "taints": list(spec.get("taints") or [])},
        "status": {
            "ready": ready == "True",
            "bootID": str((status.get("nodeInfo") or {}).get("bootID", "")),
            "gpus": allocatable,
            "conditions": conditions,
        },
    }


def _epoch(value: Any) -> float:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _count(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0


def _pod_ready(obj: JsonObj) -> bool:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return bool(condition.get("status") == "True")
    return False


def trim_pod(obj: JsonObj) -> JsonObj:
    """Operand pods: service, node, Ready. A Job's pod also keeps its Job's name and an image it
    cannot pull: such a pod stays Pending (never Failed), so the driver lifecycle must see why."""
    meta = _meta(obj, "name", "namespace", "resourceVersion", "deletionTimestamp")
    labels = (obj.get("metadata") or {}).get("labels") or {}
    meta["labels"] = {NAME_LABEL: labels.get(NAME_LABEL, "")}
    status: JsonObj = {"ready": _pod_ready(obj)}
    if JOB_NAME_LABEL in labels:
        meta["labels"][JOB_NAME_LABEL] = labels[JOB_NAME_LABEL]
        failure = image_pull_failure(obj)
        if failure is not None:
            status["pullFailure"] = asdict(failure)
    return {
        "metadata": meta,
        "spec": {"nodeName": (obj.get("spec") or {}).get("nodeName", "")},
        "status": status,
    }


def job_pull_failures(pods: Iterable[JsonObj]) -> dict[str, PullFailure]:
    """Job name -> the image its (trimmed) pod cannot pull, for the pods that cannot pull one."""
    found: dict[str, PullFailure] = {}
    for pod in pods:
        job = ((pod.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL)
        failure = (pod.get("status") or {}).get("pullFailure")
        if job and isinstance(failure, dict):
            found[str(job)] = PullFailure(**failure)
    return found


def trim_named(obj: JsonObj) -> JsonObj:
    """DaemonSets: only which service they deploy."""
    meta = _meta(obj, "name", "namespace", "resourceVersion")
    labels = (obj.get("metadata") or {}).get("labels") or {}
    meta["labels"] = {NAME_LABEL: labels.get(NAME_LABEL, "")}
    return {"metadata": meta}


def trim_config_map(obj: JsonObj) -> JsonObj:
    return {"metadata": _meta(obj, "name", "namespace", "resourceVersion"), "data": obj.get("data") or {}}


def node_info(obj: JsonObj) -> NodeInfo:
    """From a trimmed node (or a full one: a node written by us goes into the cache untrimmed)."""
    meta = obj.get("metadata") or {}
    trimmed = obj if "ready" in (obj.get("status") or {}) else trim_node(obj)
    status = trimmed.get("status") or {}
    return NodeInfo(
        str(meta.get("name", "")),
        dict(meta.get("labels") or {}),
        dict(meta.get("annotations") or {}),
        unschedulable=bool((trimmed.get("spec") or {}).get("unschedulable")),
        ready=bool(status.get("ready")),
        boot_id=str(status.get("bootID", "")),
        gpus_allocatable=sum(_count(v) for v in (status.get("gpus") or {}).values()),
        conditions={
            str(c["type"]): NodeCondition(
                status=str(c.get("status") or "Unknown"),
                since=_epoch(c.get("lastTransitionTime")),
                reason=str(c.get("reason") or ""),
                message=str(c.get("message") or ""),
            )
            for c in status.get("conditions") or []
        },
        taints=tuple(
            {str(k): str(v) for k, v in t.items() if v is not None}
            for t in (trimmed.get("spec") or {}).get("taints") or []
        ),
        resource_version=str(meta.get("resourceVersion", "")),
    )


def pod_info(obj: JsonObj) -> PodInfo | None:
    """The operand pod, or None for a pod that is not scheduled or not one of ours."""
    meta = obj.get("metadata") or {}
    service = (meta.get("labels") or {}).get(NAME_LABEL, "")
    node = (obj.get("spec") or {}).get("nodeName", "")
    if not service or not node:
        return None
    ready = bool((obj.get("status") or {}).get("ready"))
    return PodInfo(str(service), str(node), ready, terminating="deletionTimestamp" in meta)


def service_of(obj: JsonObj) -> str:
    return str(((obj.get("metadata") or {}).get("labels") or {}).get(NAME_LABEL, ""))


class ViewMemo(Generic[V]):
    """Views of cached objects, each made once per object the cache holds.

    A pass converts every cached Node and pod into its view, though between two passes only a few
    objects change: at 200 nodes in a rolling upgrade that was a fifth of each pass. A watch cache
    replaces an object when it changes and never edits one in place, so the same object (by
    identity) has the same view. Called from the reconcile thread only; each call keeps just the
    objects it was given (holding them, so their ids are not reused), so departed ones go.
    """

    def __init__(self, make: Callable[[JsonObj], V]) -> None:
        self._make = make
        self._seen: dict[int, tuple[JsonObj, V]] = {}

    def __call__(self, objects: Iterable[JsonObj]) -> list[V]:
        seen: dict[int, tuple[JsonObj, V]] = {}
        made: list[V] = []
        for obj in objects:
            hit = self._seen.get(id(obj))
            view = hit[1] if hit is not None and hit[0] is obj else self._make(obj)
            seen[id(obj)] = (obj, view)
            made.append(view)
        self._seen = seen
        return made
