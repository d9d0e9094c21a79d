"""The kubelet pod-resources service: which devices each container holds, and what the node has."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import grpc
from gpuop_common.kubelet import podresources as pr

from .state import DeviceInfo, DeviceSnapshot


@dataclass
class ContainerAssignment:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class PodAssignment:
    name: str
    namespace: str
    containers: list[ContainerAssignment] = field(default_factory=list)

    def container(self, name: str) -> ContainerAssignment:
        for container in self.containers:
            if container.name == name:
                return container
        created = ContainerAssignment(name)
        self.containers.append(created)
        return created


class AssignmentStore:
    """Devices granted to containers; it survives kubelet restarts, like the kubelet's checkpoint."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], PodAssignment] = {}

    def assign(
        self, pod: str, namespace: str, container: str, resource: str, device_ids: Sequence[str]
    ) -> None:
        if not pod or not namespace or not container or not resource:
            raise ValueError("pod, namespace, container and resource must all be non-empty")
        with self._lock:
            entry = self._pods.setdefault((namespace, pod), PodAssignment(pod, namespace))
            held = entry.container(container).devices.setdefault(resource, [])
            held.extend(d for d in device_ids if d not in held)

    def release(self, pod: str, namespace: str) -> bool:
        with self._lock:
            return self._pods.pop((namespace, pod), None) is not None

    def in_use(self, resource: str) -> set[str]:
        with self._lock:
            return {
                device_id
                for entry in self._pods.values()
                for container in entry.containers
                for device_id in container.devices.get(resource, [])
            }

    def pods(self) -> list[PodAssignment]:
        with self._lock:
            return [
                PodAssignment(
                    p.name,
                    p.namespace,
                    [
                        ContainerAssignment(c.name, {r: list(d) for r, d in c.devices.items()})
                        for c in p.containers
                    ],
                )
                for p in self._pods.values()
            ]

    def get(self, pod: str, namespace: str) -> PodAssignment | None:
        return next((p for p in self.pods() if p.name == pod and p.namespace == namespace), None)


class TokenBucket:
    """The kubelet's per-server limiter (QPS with a burst); `clock` is injectable for tests."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"rate limit needs qps > 0 and burst >= 1, got qps={qps} burst={burst}")
        self._qps = qps
        self._burst = float(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._last) * self._qps)
            self._last = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False


def container_devices(
    resource: str, device_ids: Iterable[str], known: dict[str, DeviceInfo]
) -> list[pr.ContainerDevices]:
    """One entry per device and NUMA node, as the kubelet reports them."""
    entries: list[pr.ContainerDevices] = []
    for device_id in device_ids:
        device = known.get(device_id)
        nodes = device.numa_nodes if device is not None else ()
        if not nodes:
            entries.append(pr.ContainerDevices(resource_name=resource, device_ids=[device_id]))
            continue
        entries.extend(
            pr.ContainerDevices(
                resource_name=resource,
                device_ids=[device_id],
                topology=pr.TopologyInfo(nodes=[pr.NUMANode(ID=node)]),
            )
            for node in nodes
        )
    return entries


def pod_message(pod: PodAssignment, snapshot: DeviceSnapshot) -> pr.PodResources:
    containers = []
    for container in pod.containers:
        devices: list[pr.ContainerDevices] = []
        for resource, ids in container.devices.items():
            devices.extend(container_devices(resource, ids, dict(snapshot.devices.get(resource, {}))))
        containers.append(pr.ContainerResources(name=container.name, devices=devices))
    return pr.PodResources(name=pod.name, namespace=pod.namespace, containers=containers)


class PodResourcesServer(pr.PodResourcesListerServicer):
    def __init__(
        self, store: AssignmentStore, snapshot: Callable[[], DeviceSnapshot], limiter: TokenBucket | None
    ) -> None:
        self._store = store
        self._snapshot = snapshot
        self._limiter = limiter

    def _admit(self, context: grpc.ServicerContext) -> None:
        if self._limiter is not None and not self._limiter.allow():
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, "rejected by rate limit")

    def List(  # noqa: N802
        self, request: pr.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.ListPodResourcesResponse:
        self._admit(context)
        snapshot = self._snapshot()
        return pr.ListPodResourcesResponse(
            pod_resources=[pod_message(p, snapshot) for p in self._store.pods()]
        )

    def GetAllocatableResources(  # noqa: N802
        self, request: pr.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> pr.AllocatableResourcesResponse:
        self._admit(context)
        snapshot = self._snapshot()
        devices: list[pr.ContainerDevices] = []
        for resource, known in sorted(snapshot.devices.items()):
            devices.extend(container_devices(resource, sorted(known), dict(known)))
        return pr.AllocatableResourcesResponse(devices=devices)

    def Get(  # noqa: N802
        self, request: pr.GetPodResourcesRequest, context: grpc.ServicerContext
    ) -> pr.GetPodResourcesResponse:
        self._admit(context)
        pod = self._store.get(request.pod_name, request.pod_namespace)
        if pod is None:
            # A plain Go error in the kubelet, hence UNKNOWN.
            context.abort(
                grpc.StatusCode.UNKNOWN,
                f"pod {request.pod_name} in namespace {request.pod_namespace} not found",
            )
        return pr.GetPodResourcesResponse(pod_resources=pod_message(pod, self._snapshot()))
