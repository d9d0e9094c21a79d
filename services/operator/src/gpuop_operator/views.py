"""API objects -> the plain data planning works on, and trims of what the caches keep."""

from __future__ import annotations

from typing import Any

from gpuop_operator.model import LABEL_PREFIX, NodeInfo, PodInfo

JsonObj = dict[str, Any]
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"


def _meta(obj: JsonObj, *keys: str) -> JsonObj:
    meta = obj.get("metadata") or {}
    return {key: meta[key] for key in keys if key in meta}


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
    return {
        "metadata": meta,
        "spec": {"unschedulable": bool((obj.get("spec") or {}).get("unschedulable"))},
        "status": {
            "ready": ready == "True",
            "bootID": str((status.get("nodeInfo") or {}).get("bootID", "")),
            "gpus": allocatable,
        },
    }


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
    meta = _meta(obj, "name", "namespace", "resourceVersion", "deletionTimestamp")
    labels = (obj.get("metadata") or {}).get("labels") or {}
    meta["labels"] = {NAME_LABEL: labels.get(NAME_LABEL, "")}
    return {
        "metadata": meta,
        "spec": {"nodeName": (obj.get("spec") or {}).get("nodeName", "")},
        "status": {"ready": _pod_ready(obj)},
    }


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
