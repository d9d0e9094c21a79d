# The servicer methods carry the proto rpc names (GetDevicePluginOptions, ...), as gRPC requires.
# ruff: noqa: N802
"""gRPC adapter: the kubelet's DevicePlugin service for one resource, over the resource manager.

It holds no logic of its own: requests are checked and answered by the pure functions in
`allocation` and `topology`; `ResourceView` is the thread-safe current device list and health that
the resource manager publishes and ListAndWatch streams.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import grpc
from gpuop_common.kubelet import deviceplugin as dp

from gpuop_device_plugin.allocation import AllocationRequestError, ContainerGrant, grant, validate_request
from gpuop_device_plugin.devices import MpsClients, PluginDevice
from gpuop_device_plugin.topology import preferred_devices

log = logging.getLogger(__name__)

# How often an idle ListAndWatch stream checks that the kubelet is still there / we are stopping.
_STREAM_CHECK_S = 1.0
_CACHE_SIZE = 1024


@dataclass(frozen=True, slots=True)
class ResourceSnapshot:
    version: int
    devices: tuple[PluginDevice, ...]
    by_id: Mapping[str, PluginDevice]
    health: Mapping[str, str]
    shared: bool = False
    fail_requests_greater_than_one: bool = False
    cdi: bool = False
    mps: MpsClients | None = None


@dataclass
class ResourceView:
    """Current devices of one resource; `publish` wakes every ListAndWatch stream on a change."""

    resource: str
    _snapshot: ResourceSnapshot = field(default_factory=lambda: ResourceSnapshot(0, (), {}, {}))
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _closed: bool = False

    @property
    def snapshot(self) -> ResourceSnapshot:
        return self._snapshot  # replaced atomically, never mutated

    def publish(
        self,
        devices: tuple[PluginDevice, ...],
        health: Mapping[str, str],
        *,
        shared: bool = False,
        fail_requests_greater_than_one: bool = False,
        cdi: bool = False,
        mps: MpsClients | None = None,
    ) -> bool:
        """Install a new state; True (and a ListAndWatch update) only when something changed."""
        own_health = {d.id: health.get(d.id, dp.UNHEALTHY) for d in devices}
        with self._cond:
            old = self._snapshot
            same_list = old.devices == devices and dict(old.health) == own_health
            same_flags = (old.shared, old.fail_requests_greater_than_one, old.cdi, old.mps) == (
                shared,
                fail_requests_greater_than_one,
                cdi,
                mps,
            )
            if same_list and same_flags:
                return False
            version = old.version + (0 if same_list else 1)
            self._snapshot = ResourceSnapshot(
                version, devices, {d.id: d for d in devices}, own_health, shared,
                fail_requests_greater_than_one, cdi, mps,
            )  # fmt: skip
            self._cond.notify_all()
        return not same_list

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def wait_newer(self, version: int, timeout: float) -> ResourceSnapshot | None:
        """The first snapshot newer than `version`, None on timeout or close."""
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._snapshot.version > version, timeout)
            if self._closed or self._snapshot.version <= version:
                return None
            return self._snapshot

    @property
    def closed(self) -> bool:
        return self._closed


def list_response(snapshot: ResourceSnapshot) -> dp.ListAndWatchResponse:
    devices = []
    for device in snapshot.devices:
        message = dp.Device(ID=device.id, health=snapshot.health.get(device.id, dp.UNHEALTHY))
        if device.numa_node is not None:
            message.topology.nodes.append(dp.NUMANode(ID=device.numa_node))
        devices.append(message)
    return dp.ListAndWatchResponse(devices=devices)


def container_response(result: ContainerGrant) -> dp.ContainerAllocateResponse:
    return dp.ContainerAllocateResponse(
        envs=result.envs,
        devices=[
            dp.DeviceSpec(container_path=n.path, host_path=n.path, permissions=n.permissions)
            for n in result.devices
        ],
        annotations=result.annotations,
        cdi_devices=[dp.CDIDevice(name=name) for name in result.cdi_devices],
        mounts=[
            dp.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in result.mounts
        ],
    )


_CODES = {"INVALID_ARGUMENT": grpc.StatusCode.INVALID_ARGUMENT}
_CODES["FAILED_PRECONDITION"] = grpc.StatusCode.FAILED_PRECONDITION


class DevicePluginAdapter(dp.DevicePluginServicer):
    def __init__(self, view: ResourceView) -> None:
        self.view = view
        self.streams = 0  # open ListAndWatch streams (for readiness and tests)
        # Answers are a pure function of (snapshot, ids): keep the built responses of the current
        # snapshot, so the kubelet re-allocating the same devices costs a dict lookup.
        self._cache_for: ResourceSnapshot | None = None
        self._cache: dict[tuple[str, ...], dp.ContainerAllocateResponse] = {}

    def _container_response(
        self, snapshot: ResourceSnapshot, ids: tuple[str, ...]
    ) -> dp.ContainerAllocateResponse:
        if self._cache_for is not snapshot:
            self._cache_for, self._cache = snapshot, {}
        cached = self._cache.get(ids)
        if cached is None:
            chosen = validate_request(
                self.view.resource,
                ids,
                snapshot.by_id,
                snapshot.health,
                shared=snapshot.shared,
                fail_requests_greater_than_one=snapshot.fail_requests_greater_than_one,
            )
            cached = container_response(grant(self.view.resource, chosen, cdi=snapshot.cdi, mps=snapshot.mps))
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[ids] = cached
        return cached

    def GetDevicePluginOptions(
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> Iterator[dp.ListAndWatchResponse]:
        snapshot = self.view.snapshot
        self.streams += 1
        log.info("kubelet opened ListAndWatch", extra={"resource": self.view.resource})
        try:
            yield list_response(snapshot)
            while context.is_active() and not self.view.closed:
                newer = self.view.wait_newer(snapshot.version, _STREAM_CHECK_S)
                if newer is not None:
                    snapshot = newer
                    yield list_response(snapshot)
        finally:
            self.streams -= 1

    def GetPreferredAllocation(
        self, request: dp.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> dp.PreferredAllocationResponse:
        snapshot = self.view.snapshot
        responses = []
        for req in request.container_requests:
            unknown = sorted(
                {i for i in [*req.available_deviceIDs, *req.must_include_deviceIDs]} - set(snapshot.by_id)
            )
            if unknown:
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{self.view.resource}: unknown device ids: {', '.join(unknown)}",
                )
            if req.allocation_size < 0:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, "allocation_size must not be negative")
            ids = preferred_devices(
                [snapshot.by_id[i] for i in req.available_deviceIDs],
                [snapshot.by_id[i] for i in req.must_include_deviceIDs],
                req.allocation_size,
            )
            responses.append(dp.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return dp.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: dp.AllocateRequest, context: grpc.ServicerContext) -> dp.AllocateResponse:
        snapshot = self.view.snapshot
        if not request.container_requests:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{self.view.resource}: no container requests")
        responses = []
        try:
            for req in request.container_requests:
                responses.append(self._container_response(snapshot, tuple(req.devices_ids)))
        except AllocationRequestError as exc:
            log.warning("allocate refused", extra={"resource": self.view.resource, "error": str(exc)})
            context.abort(_CODES.get(exc.code, grpc.StatusCode.INVALID_ARGUMENT), str(exc))
        return dp.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: dp.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> dp.PreStartContainerResponse:
        # Nothing to prepare (no GPU reset; the MPS daemon is its own operand); the kubelet only calls
        # this when asked.
        return dp.PreStartContainerResponse()
