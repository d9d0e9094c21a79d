"""The gRPC edge: plugin registration, DRAPlugin (v1 and v1beta1) and the optional
DRAResourceHealth stream (v1alpha1) on unix sockets.

Serve first, register second: the service socket `<plugins dir>/<driver>/dra.sock` is up before the
registration socket `<registry dir>/<driver>-reg.sock` appears, so the kubelet's first call finds
it. The kubelet removes a registration when the socket goes; `check()` serves it again if it was
deleted (a wiped plugins_registry), which the kubelet's watcher treats as a new registration.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, cast

import grpc
from gpuop_common.kubelet import UnixServer, dra, drahealth, serve_unix
from gpuop_common.kubelet import pluginregistration as reg

from gpuop_dra_driver.driver import ClaimRef, DraDriver, PrepareAnswer
from gpuop_dra_driver.health import Health
from gpuop_dra_driver.healthfeed import HealthFeed, HealthReport

log = logging.getLogger(__name__)

# Our DRAPlugin versions in preference order, then the optional health stream. The kubelet uses the
# first DRAPlugin name it knows, so the health service's name after them never stands in their way.
SERVED_VERSIONS = (dra.SERVICE_V1, dra.SERVICE_V1BETA1, drahealth.SERVICE)
# Every open stream holds one of the service socket's worker threads; the kubelet keeps one per
# registered instance. A cap keeps stray clients from starving NodePrepareResources.
MAX_HEALTH_STREAMS = 4
SERVICE_WORKERS = 8
_HEALTH_VALUES = {
    Health.HEALTHY: drahealth.HEALTHY,
    Health.UNHEALTHY: drahealth.UNHEALTHY,
    Health.UNKNOWN: drahealth.UNKNOWN,
}


class RegistrationService(reg.RegistrationServicer):
    def __init__(self, driver: str, endpoint: Path) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.status: tuple[bool, str] | None = None
        self.changed = threading.Event()

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:  # noqa: N802
        return reg.PluginInfo(
            type=reg.DRA_PLUGIN,
            name=self.driver,
            endpoint=str(self.endpoint),
            supported_versions=list(SERVED_VERSIONS),
        )

    def NotifyRegistrationStatus(  # noqa: N802
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        self.status = (request.plugin_registered, request.error)
        if request.plugin_registered:
            log.info("registered with the kubelet", extra={"driver": self.driver})
        else:
            log.error(
                "kubelet refused the registration", extra={"driver": self.driver, "error": request.error}
            )
        self.changed.set()
        return reg.RegistrationStatusResponse()


def _refs(claims: Iterable[Any]) -> list[ClaimRef]:
    return [ClaimRef(c.namespace, c.uid, c.name) for c in claims]


def _fill_prepare(response: Any, answers: Mapping[str, PrepareAnswer]) -> Any:
    """Fill a v1 or v1beta1 NodePrepareResourcesResponse (same fields and numbers)."""
    for uid, answer in answers.items():
        entry = response.claims[uid]
        if answer.error:
            entry.error = answer.error
            continue
        for d in answer.devices:
            entry.devices.add(
                request_names=list(d.requests),
                pool_name=d.pool,
                device_name=d.device,
                cdi_device_ids=list(d.cdi_ids),
            )
    return response


def _fill_unprepare(response: Any, errors: Mapping[str, str]) -> Any:
    for uid, error in errors.items():
        response.claims[uid].error = error
    return response


class DraV1Service(dra.v1_grpc.DRAPluginServicer):
    def __init__(self, driver: DraDriver) -> None:
        self.driver = driver

    def NodePrepareResources(  # noqa: N802
        self, request: dra.v1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.v1.NodePrepareResourcesResponse:
        answers = self.driver.prepare(_refs(request.claims))
        return cast(
            dra.v1.NodePrepareResourcesResponse, _fill_prepare(dra.v1.NodePrepareResourcesResponse(), answers)
        )

    def NodeUnprepareResources(  # noqa: N802
        self, request: dra.v1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.v1.NodeUnprepareResourcesResponse:
        errors = self.driver.unprepare(_refs(request.claims))
        return cast(
            dra.v1.NodeUnprepareResourcesResponse,
            _fill_unprepare(dra.v1.NodeUnprepareResourcesResponse(), errors),
        )


class DraV1beta1Service(dra.DRAPluginServicer):
    """The same answers for kubelets that only speak v1beta1 (no share_id, same field numbers)."""

    def __init__(self, driver: DraDriver) -> None:
        self.driver = driver

    def NodePrepareResources(  # noqa: N802
        self, request: dra.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodePrepareResourcesResponse:
        answers = self.driver.prepare(_refs(request.claims))
        return cast(
            dra.NodePrepareResourcesResponse, _fill_prepare(dra.NodePrepareResourcesResponse(), answers)
        )

    def NodeUnprepareResources(  # noqa: N802
        self, request: dra.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodeUnprepareResourcesResponse:
        errors = self.driver.unprepare(_refs(request.claims))
        return cast(
            dra.NodeUnprepareResourcesResponse, _fill_unprepare(dra.NodeUnprepareResourcesResponse(), errors)
        )


def health_response(report: HealthReport, pool: str, timeout_s: int) -> drahealth.NodeWatchResourcesResponse:
    return drahealth.NodeWatchResourcesResponse(
        devices=[
            drahealth.DeviceHealth(
                device=drahealth.DeviceIdentifier(pool_name=pool, device_name=d.state.device),
                health=_HEALTH_VALUES[d.state.health],
                last_updated_time=d.since,
                health_check_timeout_seconds=timeout_s,
                message=d.state.message[: drahealth.MAX_MESSAGE_CHARS],
            )
            for d in report.devices
        ]
    )


class DraHealthService(drahealth.DRAResourceHealthServicer):
    """NodeWatchResources: the feed's reports, for as long as the client stays and we serve."""

    def __init__(self, feed: HealthFeed, pool: str) -> None:
        self.feed = feed
        self.pool = pool
        self._lock = threading.Lock()
        self._streams = 0

    @property
    def open_streams(self) -> int:
        with self._lock:
            return self._streams

    def NodeWatchResources(  # noqa: N802
        self, request: drahealth.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[drahealth.NodeWatchResourcesResponse]:
        with self._lock:
            if self._streams >= MAX_HEALTH_STREAMS:
                context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"{MAX_HEALTH_STREAMS} health streams are open already",
                )
            self._streams += 1
        # Runs when the RPC ends for any reason: the client left, or the server is stopping.
        context.add_callback(self.feed.wake)
        log.info("health stream opened", extra={"peer": context.peer()})
        try:
            for report in self.feed.watch(context.is_active):
                yield health_response(report, self.pool, self.feed.timeout_s)
        finally:
            with self._lock:
                self._streams -= 1
            log.info("health stream closed", extra={"peer": context.peer()})


class PluginSockets:
    """Both sockets of one driver instance; `start()`, `check()` each pass, `stop()` removes them."""

    def __init__(self, driver: DraDriver, plugins_dir: Path, registry_dir: Path, health: HealthFeed) -> None:
        self.driver = driver
        self.health = health
        self.service_socket = plugins_dir / driver.driver / "dra.sock"
        self.registration_socket = registry_dir / f"{driver.driver}-reg.sock"
        self.registration = RegistrationService(driver.driver, self.service_socket)
        self.health_service = DraHealthService(health, driver.node)
        self._service: UnixServer | None = None
        self._registrar: UnixServer | None = None

    def start(self) -> None:
        self.service_socket.parent.mkdir(parents=True, exist_ok=True)
        self._service = serve_unix(
            self.service_socket,
            [
                lambda s: dra.v1_grpc.add_DRAPluginServicer_to_server(DraV1Service(self.driver), s),
                lambda s: dra.add_DRAPluginServicer_to_server(DraV1beta1Service(self.driver), s),
                lambda s: drahealth.add_DRAResourceHealthServicer_to_server(self.health_service, s),
            ],
            max_workers=SERVICE_WORKERS,
            thread_name_prefix="dra",
        )
        self._serve_registration()

    def _serve_registration(self) -> None:
        if self._registrar is not None:
            self._registrar.stop(grace=0.2)
        self.registration.status = None
        self._registrar = serve_unix(
            self.registration_socket,
            [lambda s: reg.add_RegistrationServicer_to_server(self.registration, s)],
            max_workers=2,
            thread_name_prefix="dra-reg",
        )

    @property
    def registered(self) -> bool:
        return self.registration.status is not None and self.registration.status[0]

    def check(self) -> None:
        """Serve again whatever socket was deleted under us."""
        if self._service is not None and not self._service.socket_exists():
            log.warning("service socket vanished; serving again", extra={"path": str(self.service_socket)})
            self._service.stop(grace=0.2)
            self.start()
            return
        if self._registrar is not None and not self._registrar.socket_exists():
            log.warning(
                "registration socket vanished; serving again", extra={"path": str(self.registration_socket)}
            )
            self._serve_registration()

    def stop(self) -> None:
        for server in (self._registrar, self._service):
            if server is not None:
                server.stop(grace=0.5)
        self._registrar = self._service = None
