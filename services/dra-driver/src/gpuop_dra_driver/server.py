"""The gRPC edge: plugin registration and DRAPlugin (v1 and v1beta1) on unix sockets.

Serve first, register second: the service socket `<plugins dir>/<driver>/dra.sock` is up before the
registration socket `<registry dir>/<driver>-reg.sock` appears, so the kubelet's first call finds
it. The kubelet removes a registration when the socket goes; `check()` serves it again if it was
deleted (a wiped plugins_registry), which the kubelet's watcher treats as a new registration.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, cast

import grpc
from gpuop_common.kubelet import UnixServer, dra, serve_unix
from gpuop_common.kubelet import pluginregistration as reg

from gpuop_dra_driver.driver import ClaimRef, DraDriver, PrepareAnswer

log = logging.getLogger(__name__)

SERVED_VERSIONS = (dra.SERVICE_V1, dra.SERVICE_V1BETA1)  # our preference order


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


class PluginSockets:
    """Both sockets of one driver instance; `start()`, `check()` each pass, `stop()` removes them."""

    def __init__(self, driver: DraDriver, plugins_dir: Path, registry_dir: Path) -> None:
        self.driver = driver
        self.service_socket = plugins_dir / driver.driver / "dra.sock"
        self.registration_socket = registry_dir / f"{driver.driver}-reg.sock"
        self.registration = RegistrationService(driver.driver, self.service_socket)
        self._service: UnixServer | None = None
        self._registrar: UnixServer | None = None

    def start(self) -> None:
        self.service_socket.parent.mkdir(parents=True, exist_ok=True)
        self._service = serve_unix(
            self.service_socket,
            [
                lambda s: dra.v1_grpc.add_DRAPluginServicer_to_server(DraV1Service(self.driver), s),
                lambda s: dra.add_DRAPluginServicer_to_server(DraV1beta1Service(self.driver), s),
            ],
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
