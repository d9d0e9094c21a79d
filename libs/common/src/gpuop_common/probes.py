"""The one probe server of every gpuop service: `/healthz`, `/readyz` and optionally `/metrics`.

Liveness and readiness are a flag plus named check callables; a check that returns False or raises
fails the probe and its name appears in the 503 body, so `kubectl describe pod` says why. `/metrics`
serves the service's own `CollectorRegistry` (never the process-global one, which would leak the
client library's default collectors into every exporter).

The server runs either on the caller's event loop (`await start()`) or in a background thread with
its own loop (`start_in_thread()`, or use it as a context manager) for synchronous services.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from types import TracebackType

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

Check = Callable[[], bool]

_THREAD_START_TIMEOUT_S = 10.0


class ProbeServer:
    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        registry: CollectorRegistry | None = None,
        ready: bool = False,
    ) -> None:
        self.host = host
        self._requested_port = port
        self._registry = registry
        self._ready = ready
        self._ready_reason = "starting"
        self._readiness_checks: dict[str, Check] = {}
        self._liveness_checks: dict[str, Check] = {}
        self._lock = threading.Lock()
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None
        self._thread_loop: asyncio.AbstractEventLoop | None = None

    # -- state the service sets --------------------------------------------------------------------

    def set_ready(self, ready: bool, reason: str = "") -> None:
        """Flip readiness; `reason` is shown in the 503 body while not ready."""
        with self._lock:
            self._ready = ready
            self._ready_reason = reason or ("ready" if ready else "not ready")

    @property
    def ready(self) -> bool:
        return self._ready

    def add_readiness_check(self, name: str, check: Check) -> None:
        with self._lock:
            self._readiness_checks[name] = check

    def add_liveness_check(self, name: str, check: Check) -> None:
        with self._lock:
            self._liveness_checks[name] = check

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with port 0)."""
        if self._port is None:
            raise RuntimeError("probe server is not started")
        return self._port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # -- HTTP --------------------------------------------------------------------------------------

    @staticmethod
    def _failing(checks: dict[str, Check]) -> list[str]:
        failing = []
        for name, check in checks.items():
            try:
                ok = check()
            except Exception:
                log.exception("probe check raised", extra={"check": name})
                ok = False
            if not ok:
                failing.append(name)
        return failing

    async def _healthz(self, _request: web.Request) -> web.Response:
        with self._lock:
            checks = dict(self._liveness_checks)
        failing = self._failing(checks)
        if failing:
            return web.Response(status=503, text=f"unhealthy: {', '.join(failing)}\n")
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        with self._lock:
            ready, reason, checks = self._ready, self._ready_reason, dict(self._readiness_checks)
        if not ready:
            return web.Response(status=503, text=f"not ready: {reason}\n")
        failing = self._failing(checks)
        if failing:
            return web.Response(status=503, text=f"not ready: {', '.join(failing)}\n")
        return web.Response(text="ok\n")

    async def _metrics(self, _request: web.Request) -> web.Response:
        assert self._registry is not None
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if self._registry is not None:
            app.router.add_get("/metrics", self._metrics)
        return app

    # -- lifecycle on the caller's loop ------------------------------------------------------------

    async def start(self) -> None:
        """Bind and serve on the running loop; raises OSError if the address is taken."""
        if self._runner is not None:
            raise RuntimeError("probe server already started")
        runner = web.AppRunner(self._app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self._requested_port)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._port = int(runner.addresses[0][1])
        self._runner = runner
        log.info("probe server listening", extra={"address": self.url})

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- lifecycle in a background thread ----------------------------------------------------------

    def start_in_thread(self) -> None:
        """Serve from a daemon thread with its own loop; returns once bound (or raises its error)."""
        if self._thread is not None:
            raise RuntimeError("probe server already started")
        started = threading.Event()
        failure: list[BaseException] = []
        loop = asyncio.new_event_loop()

        def serve() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self.start())
            except BaseException as exc:
                failure.append(exc)
                started.set()
                loop.close()
                return
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        thread = threading.Thread(target=serve, name="gpuop-probes", daemon=True)
        thread.start()
        if not started.wait(_THREAD_START_TIMEOUT_S):
            raise TimeoutError(f"probe server did not bind {self.host}:{self._requested_port} in time")
        if failure:
            thread.join()
            raise failure[0]
        self._thread, self._thread_loop = thread, loop

    def stop_thread(self, timeout: float = 5.0) -> None:
        if self._thread is None or self._thread_loop is None:
            return
        self._thread_loop.call_soon_threadsafe(self._thread_loop.stop)
        self._thread.join(timeout)
        self._thread = None
        self._thread_loop = None

    def __enter__(self) -> ProbeServer:
        self.start_in_thread()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_thread()
