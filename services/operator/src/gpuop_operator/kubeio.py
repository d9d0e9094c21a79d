"""The operator's API I/O: the shared JSON-dict client from `gpuop_common.kubejson`.

Kept as the operator's own import point so its modules and tests name one place; the client,
`Resource` descriptors and watch semantics (410 -> WatchExpiredError, `on_open` for shutdown) live
in gpuop_common, shared with the simulator's controllers.
"""

from __future__ import annotations

from gpuop_common.kubejson import (
    CONFIGMAPS,
    CRDS,
    DAEMONSETS,
    DEVICECONFIGS,
    JOBS,
    JSON_PATCH,
    MERGE_PATCH,
    NODES,
    PODS,
    JsonObj,
    KubeJson,
    Resource,
    WatchExpiredError,
)

__all__ = [
    "CONFIGMAPS",
    "CRDS",
    "DAEMONSETS",
    "DEVICECONFIGS",
    "JOBS",
    "JSON_PATCH",
    "MERGE_PATCH",
    "NODES",
    "PODS",
    "JsonObj",
    "KubeJson",
    "Resource",
    "WatchExpiredError",
]
