"""The kubelet device manager: Registration server, one client per resource, ListAndWatch streams."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import dial_unix, is_socket

from .state import (
    AllocationError,
    DeviceInfo,
    DeviceSnapshot,
    choose_devices,
    devices_from_response,
    explicit_devices_error,
    register_request_error,
)

log = logging.getLogger(__name__)

THREAD_PREFIX = "kubelet-emu"


@dataclass
class Allocation:
    """What the plugin answered for one container's devices of one resource."""

    resource: str
    device_ids: list[str]
    response: dp.ContainerAllocateResponse
    preferred: list[str] | None = None


@dataclass(eq=False)
class _Endpoint:
    resource: str
    path: Path
    channel: grpc.Channel
    stub: dp.DevicePluginStub
    options: dp.DevicePluginOptions
    call: grpc.CallIterator[dp.ListAndWatchResponse] | None = None
    thread: threading.Thread | None = None
    stopped: bool = False


@dataclass
class DeviceManagerConfig:
    socket_dir: Path
    dial_timeout: float = 10.0
    rpc_timeout: float = 10.0
    # How long devices of a plugin whose stream ended stay (as Unhealthy) before the resource goes.
    endpoint_grace_s: float = 300.0
    pre_start_timeout: float = dp.PRE_START_CONTAINER_TIMEOUT_S


class DeviceManager(dp.RegistrationServicer):
    """Holds the device state; `on_change` runs (outside locks) after every change of it."""

    def __init__(self, config: DeviceManagerConfig, on_change: Callable[[], None]) -> None:
        self._config = config
        self._on_change = on_change
        self._lock = threading.Lock()
        self._endpoints: dict[str, _Endpoint] = {}
        self._devices: dict[str, dict[str, DeviceInfo]] = {}
        self._grace: dict[str, threading.Timer] = {}
        self._closed = False

    # --- Registration service (called by plugins on kubelet.sock) ---

    def Register(self, request: dp.RegisterRequest, context: grpc.ServicerContext) -> dp.Empty:  # noqa: N802
        error = register_request_error(
            request.version, request.resource_name, request.endpoint, self._config.socket_dir
        )
        if error is None:
            error = self.connect(request.resource_name, self._config.socket_dir / request.endpoint)
        if error is not None:
            log.info("refused device plugin registration for %r: %s", request.resource_name, error)
            # The kubelet returns a plain Go error, which gRPC reports as UNKNOWN.
            context.abort(grpc.StatusCode.UNKNOWN, error)
        log.info("registered device plugin %r at %s", request.resource_name, request.endpoint)
        return dp.Empty()

    # --- plugin connections ---

    def connect(self, resource: str, path: Path) -> str | None:
        """Dial the plugin, read its options and start ListAndWatch; return an error text on failure."""
        if not is_socket(path):
            return f"device plugin endpoint {path} is not a unix socket"
        try:
            channel = dial_unix(path, self._config.dial_timeout)
        except (ConnectionError, ValueError) as exc:
            return f"cannot connect to device plugin {resource}: {exc}"
        stub = dp.DevicePluginStub(channel)
        try:
            options = stub.GetDevicePluginOptions(dp.Empty(), timeout=self._config.rpc_timeout)
        except grpc.RpcError as exc:
            channel.close()
            return f"GetDevicePluginOptions of {resource} failed: {_rpc_text(exc)}"
        endpoint = _Endpoint(resource=resource, path=path, channel=channel, stub=stub, options=options)
        with self._lock:
            if self._closed:
                channel.close()
                return "kubelet is shutting down"
            previous = self._endpoints.get(resource)
            self._endpoints[resource] = endpoint
            self._devices.setdefault(resource, {})
            grace = self._grace.pop(resource, None)
            endpoint.call = stub.ListAndWatch(dp.Empty())
            endpoint.thread = threading.Thread(
                target=self._watch, args=(endpoint,), name=f"{THREAD_PREFIX}-lw-{resource}", daemon=True
            )
            endpoint.thread.start()
        if grace is not None:
            grace.cancel()
        if previous is not None:
            # A newer Register for the same resource replaces the old client.
            self._close_endpoint(previous)
        self._on_change()
        return None

    def disconnect(self, resource: str) -> None:
        """The plugin went away (plugin-watcher deregistration): as if its stream had ended."""
        with self._lock:
            endpoint = self._endpoints.get(resource)
        if endpoint is not None:
            self._close_endpoint(endpoint)
            self._stream_ended(endpoint)

    def _watch(self, endpoint: _Endpoint) -> None:
        assert endpoint.call is not None
        try:
            for response in endpoint.call:
                self._replace_devices(endpoint, devices_from_response(response.devices))
        except grpc.RpcError as exc:
            if not endpoint.stopped:
                log.warning("ListAndWatch of %s ended: %s", endpoint.resource, _rpc_text(exc))
        finally:
            self._stream_ended(endpoint)

    def _replace_devices(self, endpoint: _Endpoint, devices: dict[str, DeviceInfo]) -> None:
        with self._lock:
            if self._endpoints.get(endpoint.resource) is not endpoint:
                return
            if self._devices.get(endpoint.resource) == devices:
                return
            self._devices[endpoint.resource] = devices
        log.info(
            "%s: %d devices, %d healthy",
            endpoint.resource,
            len(devices),
            sum(1 for d in devices.values() if d.healthy),
        )
        self._on_change()

    def _stream_ended(self, endpoint: _Endpoint) -> None:
        with self._lock:
            if self._closed or self._endpoints.get(endpoint.resource) is not endpoint:
                return
            del self._endpoints[endpoint.resource]
            self._mark_unhealthy_locked(endpoint.resource)
            self._start_grace_locked(endpoint.resource)
        endpoint.channel.close()
        self._on_change()

    def _mark_unhealthy_locked(self, resource: str) -> None:
        self._devices[resource] = {
            dev_id: DeviceInfo(dev_id, dp.UNHEALTHY, d.numa_nodes)
            for dev_id, d in self._devices.get(resource, {}).items()
        }

    def _start_grace_locked(self, resource: str) -> None:
        old = self._grace.pop(resource, None)
        if old is not None:
            old.cancel()
        timer = threading.Timer(self._config.endpoint_grace_s, self._grace_expired, args=(resource,))
        timer.name = f"{THREAD_PREFIX}-grace-{resource}"
        timer.daemon = True
        self._grace[resource] = timer
        timer.start()

    def _grace_expired(self, resource: str) -> None:
        with self._lock:
            if resource in self._endpoints or resource not in self._grace:
                return
            del self._grace[resource]
            self._devices.pop(resource, None)
        log.info("device plugin for %s did not come back within the grace period; resource removed", resource)
        self._on_change()

    def _close_endpoint(self, endpoint: _Endpoint) -> None:
        endpoint.stopped = True
        if endpoint.call is not None:
            endpoint.call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leaves it untyped
        if endpoint.thread is not None and endpoint.thread is not threading.current_thread():
            endpoint.thread.join(timeout=self._config.rpc_timeout)
        endpoint.channel.close()

    def reopen(self) -> None:
        """Accept registrations again after a full stop (a kubelet started anew)."""
        with self._lock:
            self._closed = False
            self._devices = {res: {} for res in self._devices}

    def drop_all(self, keep_resources: bool) -> None:
        """Cancel every stream. With keep_resources (a kubelet restart) resources stay, empty."""
        with self._lock:
            endpoints = list(self._endpoints.values())
            self._endpoints.clear()
            timers = list(self._grace.values())
            self._grace.clear()
            if keep_resources:
                # From its checkpoint a restarted kubelet knows the resources but no devices, so
                # capacity reads zero until each plugin registers again.
                self._devices = {res: {} for res in self._devices}
            else:
                self._closed = True
        for timer in timers:
            timer.cancel()
            if timer is not threading.current_thread():
                timer.join()
        for endpoint in endpoints:
            self._close_endpoint(endpoint)
        if keep_resources:
            with self._lock:
                for resource in self._devices:
                    self._start_grace_locked(resource)
        self._on_change()

    # --- queries ---

    def snapshot(self) -> DeviceSnapshot:
        with self._lock:
            return DeviceSnapshot({res: dict(devs) for res, devs in self._devices.items()})

    def options(self, resource: str) -> dp.DevicePluginOptions | None:
        with self._lock:
            endpoint = self._endpoints.get(resource)
        return endpoint.options if endpoint is not None else None

    def _endpoint(self, resource: str) -> _Endpoint:
        with self._lock:
            endpoint = self._endpoints.get(resource)
        if endpoint is None:
            raise AllocationError(f"no device plugin registered for resource {resource!r}")
        return endpoint

    # --- allocation, as the kubelet does at pod admission ---

    def get_preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        endpoint = self._endpoint(resource)
        request = dp.PreferredAllocationRequest(
            container_requests=[
                dp.ContainerPreferredAllocationRequest(
                    available_deviceIDs=list(available),
                    must_include_deviceIDs=list(must_include),
                    allocation_size=size,
                )
            ]
        )
        try:
            response = endpoint.stub.GetPreferredAllocation(request, timeout=self._config.rpc_timeout)
        except grpc.RpcError as exc:
            raise AllocationError(f"GetPreferredAllocation of {resource} failed: {_rpc_text(exc)}") from None
        if not response.container_responses:
            return []
        return list(response.container_responses[0].deviceIDs)

    def allocate(self, resource: str, devices: int | Sequence[str], in_use: set[str]) -> Allocation:
        """Pick (for a count) or check (for explicit ids) devices, then Allocate and PreStartContainer."""
        endpoint = self._endpoint(resource)
        known = self.snapshot().devices.get(resource, {})
        preferred: list[str] | None = None
        if isinstance(devices, int):
            available = sorted(d.id for d in known.values() if d.healthy and d.id not in in_use)
            if len(available) < devices:
                raise AllocationError(
                    f"requested {devices} {resource} but only {len(available)} healthy devices are free"
                )
            if endpoint.options.get_preferred_allocation_available:
                preferred = self.get_preferred_allocation(resource, available, (), devices)
            chosen = choose_devices(available, devices, preferred or ())
        else:
            chosen = list(devices)
            problem = explicit_devices_error(resource, chosen, known, in_use)
            if problem is not None:
                raise AllocationError(problem)
        request = dp.AllocateRequest(container_requests=[dp.ContainerAllocateRequest(devices_ids=chosen)])
        try:
            response = endpoint.stub.Allocate(request, timeout=self._config.rpc_timeout)
        except grpc.RpcError as exc:
            raise AllocationError(f"Allocate of {resource} {chosen} failed: {_rpc_text(exc)}") from None
        if not response.container_responses:
            raise AllocationError(f"Allocate of {resource} returned no container responses")
        if endpoint.options.pre_start_required:
            try:
                endpoint.stub.PreStartContainer(
                    dp.PreStartContainerRequest(devices_ids=chosen), timeout=self._config.pre_start_timeout
                )
            except grpc.RpcError as exc:
                raise AllocationError(f"PreStartContainer of {resource} failed: {_rpc_text(exc)}") from None
        return Allocation(resource, chosen, response.container_responses[0], preferred)


def _rpc_text(exc: grpc.RpcError) -> str:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    return f"{code.name if code else 'error'}: {details}"
