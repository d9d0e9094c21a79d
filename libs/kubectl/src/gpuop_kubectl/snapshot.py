"""Everything the status table, the doctor and must-gather look at, read once (the I/O edge).

Reads never fail the command: a resource the user may not read (403) or that is not installed (404,
e.g. no DRA API) is noted in `unreadable` with the API's answer, and the rest goes on. That is what
makes the doctor and must-gather useful with partial RBAC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from gpuop_common.kubejson import (
    DEVICECONFIGS,
    EVENTS,
    JOBS,
    NODES,
    PODS,
    RESOURCESLICES,
    KubeJson,
    Resource,
)
from gpuop_common.kubeobj import Obj, name_of, namespace_of, spec_of, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpuop_kubectl.table import is_gpu_node

LOG_TAIL_LINES = 20
T = TypeVar("T")
# Answers that mean "you cannot see this here", not "the cluster is broken": note them and go on.
SKIPPABLE = (401, 403, 404, 405)


@dataclass
class Snapshot:
    namespace: str
    nodes: list[Obj] = field(default_factory=list)  # every Node (the doctor needs non-GPU ones too)
    pods: list[Obj] = field(default_factory=list)
    deviceconfigs: list[Obj] = field(default_factory=list)
    jobs: list[Obj] = field(default_factory=list)  # the release namespace's Jobs (driver, remediation)
    events: list[Obj] = field(default_factory=list)  # the namespace's and the GPU nodes'
    slices: list[Obj] = field(default_factory=list)
    logs: dict[str, str] = field(default_factory=dict)  # "ns/pod/container[/previous]" -> tail
    unreadable: list[str] = field(default_factory=list)

    @property
    def gpu_nodes(self) -> list[Obj]:
        return [n for n in self.nodes if is_gpu_node(n)]

    def note(self, what: str, error: BaseException) -> None:
        reason = f"{error.status} {error.reason}" if isinstance(error, ApiException) else str(error)
        self.unreadable.append(f"{what}: {reason}".strip())


def log_key(pod: Obj, container: str, previous: bool) -> str:
    return f"{namespace_of(pod)}/{name_of(pod)}/{container}" + ("/previous" if previous else "")


def _guarded(snapshot: Snapshot, what: str, read: Callable[[], T], default: T) -> T:
    try:
        return read()
    except ApiException as error:
        if error.status not in SKIPPABLE:
            raise
        snapshot.note(what, error)
        return default


def _list(
    kube: KubeJson, snapshot: Snapshot, resource: Resource, namespace: str | None = None, **q: str
) -> list[Obj]:
    where = f" in {namespace}" if namespace else ""
    return _guarded(
        snapshot, f"list {resource.plural}{where}", lambda: kube.list(resource, namespace, **q)[0], []
    )


def read_snapshot(kube: KubeJson, namespace: str, *, logs: bool = True) -> Snapshot:
    """One read of the cluster; `logs`: also the log tails of operand containers that restarted."""
    snap = Snapshot(namespace)
    snap.nodes = _list(kube, snap, NODES)
    snap.deviceconfigs = _list(kube, snap, DEVICECONFIGS)
    snap.pods = _list(kube, snap, PODS)
    if not snap.pods and any(u.startswith("list pods:") for u in snap.unreadable):
        snap.pods = _list(kube, snap, PODS, namespace)  # only the operands, then
    snap.jobs = _list(kube, snap, JOBS, namespace)
    snap.events = _list(kube, snap, EVENTS, namespace)
    snap.events += _list(kube, snap, EVENTS, None, fieldSelector="involvedObject.kind=Node")
    snap.slices = _list(kube, snap, RESOURCESLICES)
    if logs:
        api = client.CoreV1Api(kube.api_client)
        for pod in snap.pods:
            if namespace_of(pod) == namespace:
                for container, previous in restarted_containers(pod):
                    read_log(api, snap, pod, container, previous=previous)
    return snap


def restarted_containers(pod: Obj) -> Iterable[tuple[str, bool]]:
    """(container, previous?) whose logs explain a restart: the current run, and the one before."""
    for status in status_of(pod).get("containerStatuses") or []:
        if int(status.get("restartCount") or 0) > 0 or "terminated" in (status.get("state") or {}):
            yield str(status.get("name")), False
            if status.get("lastState", {}).get("terminated"):
                yield str(status.get("name")), True


def read_log(
    api: client.CoreV1Api,
    snap: Snapshot,
    pod: Obj,
    container: str,
    *,
    previous: bool,
    tail: int | None = LOG_TAIL_LINES,
) -> str:
    """The container's log (`kubectl logs [--previous]`), kept in `snap.logs`; "" when unreadable."""
    key = log_key(pod, container, previous)
    if key in snap.logs:
        return snap.logs[key]
    if not spec_of(pod).get("nodeName"):
        return ""

    def read() -> str:
        text = api.read_namespaced_pod_log(
            name_of(pod),
            namespace_of(pod),
            container=container,
            previous=previous,
            tail_lines=tail,
            _request_timeout=10,
        )
        return str(text or "")

    try:
        text = _guarded(snap, f"logs {key}", read, "")
    except ApiException as error:  # 400: the kubelet has no such instance (a waiting container)
        text = ""
        if error.status != 400:
            snap.note(f"logs {key}", error)
    except HTTPError as error:
        snap.note(f"logs {key}", error)
        text = ""
    snap.logs[key] = text
    return text
