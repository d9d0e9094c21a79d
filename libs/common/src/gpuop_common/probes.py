"""The one probe server of every gpuop service: `/healthz`, `/readyz` and optionally `/metrics`.

Liveness and readiness are a flag plus named check callables; a check that returns False or raises
fails the probe and its name appears in the 503 body, so `kubectl describe pod` says why. `/metrics`
serves either the service's own `CollectorRegistry` (never the process-global one, which would leak
the client library's default collectors into every exporter) or a pre-rendered body: an exporter
with 1,000+ series renders once per collection and copies bytes per scrape, which costs microseconds
instead of tens of milliseconds. Extra health paths (dcgm-exporter's `/health`) alias `/healthz`.

The server runs either on the caller's event loop (`await start()`) or in a background thread with
its own loop (`start_in_thread()`, or use it as a context manager) for synchronous services.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from types import TracebackType

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

log = logging.getLogger(__name__)

Check = Callable[[], bool]
MetricsSource = Callable[[bool], bytes]  # gzip wanted -> body (gzip-compressed when True)


def wants_gzip(accept_encoding: str) -> bool:
    """True when an `Accept-Encoding` header accepts gzip (`gzip;q=0` refuses it)."""
    for part in accept_encoding.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip().removeprefix("q=")
            return not (params and q.replace(".", "", 1).isdigit() and float(q) == 0.0)
    return False


_THREAD_START_TIMEOUT_S = 10.0


class ProbeServer:
    def __init__(
        self,
        host: str = "0.0.0.0",
        port: int = 0,
        *,
        registry: CollectorRegistry | None = None,
        ready: bool = False,
        prerendered_metrics: bool = False,
        health_aliases: Sequence[str] = (),
    ) -> None:
        """`registry` or `prerendered_metrics` (body set later by `set_metrics_source`) adds /metrics.

        `health_aliases` are extra paths answering exactly like `/healthz`.
        """
        if registry is not None and prerendered_metrics:
            raise ValueError("serve /metrics from a registry or from a pre-rendered body, not both")
        for path in health_aliases:
            if not path.startswith("/") or path in ("/healthz", "/readyz", "/metrics"):
                raise ValueError(f"health alias {path!r} must be a new absolute path")
        self.host = host
        self._requested_port = port
        self._registry = registry
        self._prerendered = prerendered_metrics
        self._metrics_source: MetricsSource | None = None
        self._metrics_content_type = CONTENT_TYPE_PLAIN_0_0_4
        self._health_aliases = tuple(health_aliases)
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

    def set_metrics_source(self, source: MetricsSource, content_type: str = CONTENT_TYPE_PLAIN_0_0_4) -> None:
        """Serve /metrics from `source` (called per scrape with "client accepts gzip"); any time.

        Until it is called, /metrics answers 503. The body must be `content_type` (default: the
        classic text format 0.0.4, what vendor exporters serve and every Prometheus reads).
        """
        if not self._prerendered:
            raise RuntimeError("construct the ProbeServer with prerendered_metrics=True to set a source")
        with self._lock:
            self._metrics_source = source
            self._metrics_content_type = content_type

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

    async def _prerendered_metrics(self, request: web.Request) -> web.Response:
        with self._lock:
            source, content_type = self._metrics_source, self._metrics_content_type
        if source is None:
            return web.Response(status=503, text="no metrics yet\n")
        gzip_ok = wants_gzip(request.headers.get("Accept-Encoding", ""))
        body = source(gzip_ok)
        headers = {"Content-Type": content_type}
        if gzip_ok:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    def _app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        for path in self._health_aliases:
            app.router.add_get(path, self._healthz)
        app.router.add_get("/readyz", self._readyz)
        if self._registry is not None:
            app.router.add_get("/metrics", self._metrics)
        elif self._prerendered:
            app.router.add_get("/metrics", self._prerendered_metrics)
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
