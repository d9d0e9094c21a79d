"""The kubelet's side of the DRA resource health stream: one NodeWatchResources per driver instance.

As the kubelet does it (design/kubelet-api.md §5, kubelet `cm/dra` health cache):
- each message updates the devices it names; a device keeps its last report until the report is
  older than its `health_check_timeout_seconds` (DEFAULT_TIMEOUT_S when 0), then it reads Unknown;
- when a stream ends the driver's cached health is dropped (its devices read Unknown), and the
  stream is opened again `retry_s` later for as long as the instance stays registered.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from gpuop_common.kubelet import drahealth

log = logging.getLogger(__name__)

DeviceKey = tuple[str, str]  # (pool name, device name)


@dataclass(frozen=True)
class DraDeviceHealth:
    """A DRA device's health as the kubelet would put it into a pod's allocatedResourcesStatus."""

    pool_name: str
    device_name: str
    health: str  # Healthy / Unhealthy / Unknown
    message: str = ""
    last_updated_time: int = 0  # the driver's, unix seconds
    health_check_timeout_seconds: int = 0


@dataclass(frozen=True)
class _Received:
    report: DraDeviceHealth
    at: float  # monotonic


class HealthCache:
    """Latest health per driver and (pool, device); thread-safe."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._drivers: dict[str, dict[DeviceKey, _Received]] = {}

    def update(self, driver: str, response: drahealth.NodeWatchResourcesResponse) -> None:
        now = self._clock()
        received = {
            (d.device.pool_name, d.device.device_name): _Received(
                DraDeviceHealth(
                    pool_name=d.device.pool_name,
                    device_name=d.device.device_name,
                    health=drahealth.status_name(d.health),
                    message=d.message,
                    last_updated_time=d.last_updated_time,
                    health_check_timeout_seconds=d.health_check_timeout_seconds,
                ),
                now,
            )
            for d in response.devices
        }
        with self._lock:
            self._drivers.setdefault(driver, {}).update(received)

    def clear(self, driver: str) -> None:
        with self._lock:
            self._drivers.pop(driver, None)

    def devices(self, driver: str) -> dict[DeviceKey, DraDeviceHealth]:
        """Every device the driver reported, reports past their timeout read Unknown."""
        now = self._clock()
        with self._lock:
            known = dict(self._drivers.get(driver, {}))
        return {key: _fresh(entry, now) for key, entry in sorted(known.items())}

    def device(self, driver: str, pool: str, device: str) -> DraDeviceHealth:
        """One device's health; Unknown when the driver never reported it (or its stream ended)."""
        found = self.devices(driver).get((pool, device))
        return found if found is not None else DraDeviceHealth(pool, device, "Unknown")


def _fresh(entry: _Received, now: float) -> DraDeviceHealth:
    timeout = entry.report.health_check_timeout_seconds or drahealth.DEFAULT_TIMEOUT_S
    if now - entry.at <= timeout:
        return entry.report
    stale = entry.report
    return DraDeviceHealth(
        stale.pool_name, stale.device_name, "Unknown", "", stale.last_updated_time, timeout
    )


class HealthStream:
    """NodeWatchResources of one registered driver instance, on its own thread until `stop()`."""

    def __init__(
        self,
        driver: str,
        channel: grpc.Channel,
        cache: HealthCache,
        on_change: Callable[[], None],
        *,
        retry_s: float = drahealth.STREAM_RETRY_S,
        thread_prefix: str = "kubelet-emu",
    ) -> None:
        self.driver = driver
        self._stub = drahealth.DRAResourceHealthStub(channel)
        self._cache = cache
        self._on_change = on_change
        self._retry_s = retry_s
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._call: grpc.CallIterator[drahealth.NodeWatchResourcesResponse] | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"{thread_prefix}-health-{driver}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if self._stop.is_set():
                    return
                self._call = self._stub.NodeWatchResources(drahealth.NodeWatchResourcesRequest())
            try:
                for response in self._call:
                    self._cache.update(self.driver, response)
                    self._on_change()
            except grpc.RpcError as exc:
                if not self._stop.is_set():
                    log.info("health stream of DRA driver %s ended: %s", self.driver, exc.code())
            finally:
                # The kubelet forgets a driver's health when its stream ends, whatever the reason.
                self._cache.clear(self.driver)
                self._on_change()
            self._stop.wait(self._retry_s)

    def stop(self) -> None:
        with self._lock:
            self._stop.set()
            if self._call is not None:
                self._call.cancel()  # type: ignore[no-untyped-call]  # grpc-stubs leaves it untyped
        if self._thread is not threading.current_thread():
            self._thread.join()
