"""Which pod holds which GPU, from the kubelet pod-resources API (`List` over its unix socket).

`assignments_from(response)` is the pure part: device id -> containers holding it, for GPU resources
(`amd.com/*`, `nvidia.com/*`, `gpuop.dev/*` from device plugins) and DRA claims of the GPU drivers.
`PodResourcesWatcher.poll()` asks the kubelet and never raises: when the socket is absent or broken
the status says so (`up` False, no assignments), the problem is logged once per change and counted.
The metrics exporter labels series with the holders; the test runner leaves held GPUs alone.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from gpuop_common.kubelet import podresources as pr
from gpuop_common.kubelet import socket_identity, unix_channel

log = logging.getLogger(__name__)

GPU_RESOURCE_PREFIXES = ("amd.com/", "nvidia.com/", "gpuop.dev/")
GPU_DRA_DRIVERS = ("gpu.amd.com", "gpu.nvidia.com", "gpu.gpuop.dev")
# Time-sliced/shared replicas are advertised as `<device id>::<n>` (NVIDIA device plugin convention).
REPLICA_SEPARATOR = "::"
# The gpuop DRA driver publishes replica n of a time-sliced device as `<device name>-ts-<n>`.
_DRA_REPLICA = re.compile(r"-ts-[0-9]+$")
LIST_TIMEOUT_S = 5.0
# A channel of its own subchannel: gRPC otherwise shares connections between channels to one target,
# and a new channel to a re-created socket would inherit the old one's reconnect backoff.
CHANNEL_OPTIONS = (("grpc.use_local_subchannel_pool", 1),)


@dataclass(frozen=True, slots=True, order=True)
class PodRef:
    namespace: str
    pod: str
    container: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod}/{self.container}"


Assignments = dict[str, tuple[PodRef, ...]]


def base_device_id(device_id: str) -> str:
    return device_id.split(REPLICA_SEPARATOR, 1)[0]


def dra_replica_name(device_name: str, replica: int) -> str:
    return f"{device_name}-ts-{replica}"


def base_dra_device(device_name: str) -> str:
    """The DRA device a time-sliced replica belongs to (`...-ts-2` -> `...`); others unchanged."""
    return _DRA_REPLICA.sub("", device_name)


def assignments_from(
    response: pr.ListPodResourcesResponse,
    prefixes: Iterable[str] = GPU_RESOURCE_PREFIXES,
    dra_drivers: Iterable[str] = GPU_DRA_DRIVERS,
) -> Assignments:
    """Device id (or DRA device name) -> holders (sorted, unique); replicas count as their base device."""
    prefixes, drivers = tuple(prefixes), set(dra_drivers)
    holders: dict[str, set[PodRef]] = {}
    for pod in response.pod_resources:
        for container in pod.containers:
            ref = PodRef(pod.namespace, pod.name, container.name)
            for devices in container.devices:
                if not devices.resource_name.startswith(prefixes):
                    continue
                for device_id in devices.device_ids:
                    holders.setdefault(base_device_id(device_id), set()).add(ref)
            for claim in container.dynamic_resources:
                for resource in claim.claim_resources:
                    if resource.driver_name in drivers and resource.device_name:
                        # A time-sliced DRA device (`<name>-ts-<n>`) counts as the device it slices.
                        holders.setdefault(base_dra_device(resource.device_name), set()).add(ref)
    return {device: tuple(sorted(refs)) for device, refs in holders.items()}


def holders_of(device_ids: Iterable[str], assignments: Assignments) -> tuple[PodRef, ...]:
    """Containers holding any of an entity's ids (a GPU is listed by UUID, BDF or partition id)."""
    found: set[PodRef] = set()
    for device_id in device_ids:
        found.update(assignments.get(device_id, ()))
    return tuple(sorted(found))


@dataclass
class PodResourcesStatus:
    up: bool = False
    errors_total: int = 0
    last_error: str = ""
    polls_total: int = 0
    assignments: Assignments = field(default_factory=dict)


class PodResourcesWatcher:
    """Polls `List` on the kubelet socket; reconnects when the kubelet re-creates the socket."""

    def __init__(self, socket_path: Path, timeout: float = LIST_TIMEOUT_S) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._identity: tuple[int, int] | None = None
        self._status = PodResourcesStatus()
        self._logged_error: str | None = None

    @property
    def status(self) -> PodResourcesStatus:
        return self._status

    def _stub(self) -> pr.PodResourcesListerStub:
        identity = socket_identity(self.socket_path)
        if identity is None:
            self._close()
            raise ConnectionError(f"pod-resources socket {self.socket_path} does not exist")
        if self._channel is None or identity != self._identity:
            self._close()
            self._channel = unix_channel(self.socket_path, CHANNEL_OPTIONS)
            self._identity = identity
        return pr.PodResourcesListerStub(self._channel)

    def _close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = None
        self._identity = None

    def poll(self) -> PodResourcesStatus:
        """One `List`; on failure the previous assignments are dropped (stale pods would mislabel)."""
        with self._lock:
            status = self._status
            status.polls_total += 1
            try:
                response = self._stub().List(pr.ListPodResourcesRequest(), timeout=self.timeout)
            except (ConnectionError, grpc.RpcError, ValueError) as exc:
                self._failed(status, *_describe(exc))
                return status
            status.assignments = assignments_from(response)
            if not status.up:
                log.info("pod-resources API reachable", extra={"socket": str(self.socket_path)})
            status.up, status.last_error, self._logged_error = True, "", None
            return status

    def _failed(self, status: PodResourcesStatus, kind: str, message: str) -> None:
        status.up = False
        status.errors_total += 1
        status.last_error = message
        status.assignments = {}
        if kind != self._logged_error:
            # Once per kind of problem: a missing socket must not flood the log every interval.
            log.warning(
                "pod-resources API unavailable; which pods hold GPUs is unknown",
                extra={"socket": str(self.socket_path), "error": message},
            )
            self._logged_error = kind

    def close(self) -> None:
        with self._lock:
            self._close()


def _describe(exc: BaseException) -> tuple[str, str]:
    """(kind, message): the kind decides whether the problem is new enough to log again."""
    if isinstance(exc, grpc.RpcError):
        code = exc.code() if hasattr(exc, "code") else None
        details = exc.details() if hasattr(exc, "details") else ""
        name = code.name if isinstance(code, grpc.StatusCode) else "UNKNOWN"
        return name, f"List failed: {name}: {details}"
    return type(exc).__name__, str(exc)
