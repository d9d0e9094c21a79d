"""One resource's plugin endpoint: serve the DevicePlugin socket, then Register with the kubelet.

Survives kubelet restarts without exiting: `check()` (called by the service loop) notices that
`kubelet.sock` was re-created (its (inode, ctime) identity changed) or that our own socket was
deleted, and serves again and re-registers. Registration failures are retried with backoff.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import grpc
from gpuop_common.kubelet import UnixServer, dial_unix, serve_unix, socket_identity
from gpuop_common.kubelet import deviceplugin as dp

from gpuop_device_plugin.plugin import DevicePluginAdapter, ResourceView

log = logging.getLogger(__name__)

REGISTER_TIMEOUT_S = 5.0
RETRY_MIN_S, RETRY_MAX_S = 0.2, 5.0


@dataclass(frozen=True, slots=True)
class Endpoint:
    resource: str
    socket_dir: Path
    socket_name: str

    @property
    def socket_path(self) -> Path:
        return self.socket_dir / self.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.socket_dir / dp.KUBELET_SOCKET_NAME


class PluginServer:
    def __init__(self, endpoint: Endpoint, view: ResourceView) -> None:
        self.endpoint = endpoint
        self.view = view
        self.adapter = DevicePluginAdapter(view)
        self._server: UnixServer | None = None
        self._registered_with: tuple[int, int] | None = None  # identity of kubelet.sock we registered on
        self._retry_at = 0.0
        self._backoff = RETRY_MIN_S
        self.registrations = 0

    @property
    def registered(self) -> bool:
        return self._registered_with is not None and self._server is not None

    def _serve(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0.2)
        self._server = serve_unix(
            self.endpoint.socket_path,
            [lambda server: dp.add_DevicePluginServicer_to_server(self.adapter, server)],
            max_workers=8,
            thread_name_prefix=f"dp-{self.endpoint.socket_name}",
        )

    def _register(self) -> None:
        with dial_unix(self.endpoint.kubelet_socket, timeout=REGISTER_TIMEOUT_S) as channel:
            dp.RegistrationStub(channel).Register(
                dp.RegisterRequest(
                    version=dp.VERSION,
                    endpoint=self.endpoint.socket_name,
                    resource_name=self.endpoint.resource,
                    options=dp.DevicePluginOptions(get_preferred_allocation_available=True),
                ),
                timeout=REGISTER_TIMEOUT_S,
            )

    def check(self, now: float | None = None) -> bool:
        """Make sure we serve and are registered with the current kubelet; True when (re)registered."""
        now = time.monotonic() if now is None else now
        kubelet = socket_identity(self.endpoint.kubelet_socket)
        ours_gone = self._server is None or not self._server.socket_exists()
        if kubelet is not None and kubelet == self._registered_with and not ours_gone:
            return False
        if kubelet is None:
            if self._registered_with is not None:
                log.warning("kubelet socket gone; waiting for it", extra={"resource": self.endpoint.resource})
                self._registered_with = None
            return False
        if now < self._retry_at:
            return False
        try:
            if ours_gone or self._registered_with is not None:
                # A new kubelet deleted every socket in the dir; listen again before registering.
                self._serve()
            self._register()
        except (OSError, ConnectionError, grpc.RpcError) as exc:
            self._registered_with = None
            self._retry_at = now + self._backoff
            self._backoff = min(self._backoff * 2, RETRY_MAX_S)
            log.warning(
                "registration with the kubelet failed; will retry",
                extra={"resource": self.endpoint.resource, "error": _describe(exc), "retry_s": self._backoff},
            )
            return False
        self.registrations += 1  # counted before `registered` turns true, for whoever polls both
        self._registered_with = kubelet
        self._backoff = RETRY_MIN_S
        log.info(
            "registered with the kubelet",
            extra={"resource": self.endpoint.resource, "endpoint": self.endpoint.socket_name},
        )
        return True

    def stop(self) -> None:
        """Stop serving and remove our socket (SIGTERM, or the resource is no longer advertised)."""
        self.view.close()
        if self._server is not None:
            self._server.stop(grace=0.5)
            self._server = None
        self._registered_with = None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, grpc.RpcError):
        details = exc.details() if hasattr(exc, "details") else ""
        return f"{exc.code().name if hasattr(exc, 'code') else 'rpc error'}: {details}"
    return str(exc)
