"""The one probe server of every gpuop service: `/healthz`, `/readyz` and optionally `/metrics`.

Liveness and readiness are a flag plus named check callables; a check that returns False or raises
fails the probe and its name appears in the 503 body, so `kubectl describe pod` says why. `/metrics`
serves either the service's own `CollectorRegistry` (never the process-global one, which would leak
the client library's default collectors into every exporter) or a pre-rendered body: an exporter
with 1,000+ series renders once per collection and copies bytes per scrape, which costs microseconds
instead of tens of milliseconds. Extra health paths (dcgm-exporter's `/health`) alias `/healthz`.

It is the standard library's threading HTTP server (one thread per connection, HTTP/1.1 keep-alive):
probes and a scrape every few seconds need nothing more, and it costs no import memory where aiohttp
costs ~11 MiB of the 60 MiB an agent may use. `start_in_thread()` (or the context manager) serves
from a background thread; `await start()` does the same from async code.
"""

from __future__ import annotations

import logging
import socket
import socketserver
import threading
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from urllib.parse import urlsplit

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


_IDLE_CONNECTION_TIMEOUT_S = 60.0  # a keep-alive connection with no request for this long is closed
_SHUTDOWN_POLL_S = 0.1  # how soon stop() is noticed by the serving thread

Response = tuple[int, dict[str, str], bytes]


def _text(status: int, text: str) -> Response:
    return status, {"Content-Type": "text/plain; charset=utf-8"}, text.encode()


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
        self._server: _HttpServer | None = None
        self._port: int | None = None
        self._thread: threading.Thread | None = None

    # -- state the service sets --------------------------------------------------------------------

    def set_ready(self, ready: bool, reason: str = "") -> None:
        """Flip readiness; `reason` is shown in the 503 body while not ready."""
        with self._lock:
            self._ready = ready
            self._ready_reason = reason or ("ready" if ready else "not ready")

    @property
    def ready(self) -> bool:
        return self._ready

    @property
    def ready_reason(self) -> str:
        """What the 503 body says while not ready (`ready` once ready)."""
        return self._ready_reason

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

    def respond(self, path: str, accept_encoding: str = "") -> Response:
        """The (status, headers, body) answer to `GET path`; the HTTP layer only writes it out."""
        if path == "/healthz" or path in self._health_aliases:
            return self._healthz()
        if path == "/readyz":
            return self._readyz()
        if path == "/metrics" and self._registry is not None:
            body = generate_latest(self._registry)
            return 200, {"Content-Type": CONTENT_TYPE_LATEST}, body
        if path == "/metrics" and self._prerendered:
            return self._prerendered_metrics(accept_encoding)
        return _text(404, "not found\n")

    def _healthz(self) -> Response:
        with self._lock:
            checks = dict(self._liveness_checks)
        failing = self._failing(checks)
        if failing:
            return _text(503, f"unhealthy: {', '.join(failing)}\n")
        return _text(200, "ok\n")

    def _readyz(self) -> Response:
        with self._lock:
            ready, reason, checks = self._ready, self._ready_reason, dict(self._readiness_checks)
        if not ready:
            return _text(503, f"not ready: {reason}\n")
        failing = self._failing(checks)
        if failing:
            return _text(503, f"not ready: {', '.join(failing)}\n")
        return _text(200, "ok\n")

    def _prerendered_metrics(self, accept_encoding: str) -> Response:
        with self._lock:
            source, content_type = self._metrics_source, self._metrics_content_type
        if source is None:
            return _text(503, "no metrics yet\n")
        gzip_ok = wants_gzip(accept_encoding)
        headers = {"Content-Type": content_type}
        if gzip_ok:
            headers["Content-Encoding"] = "gzip"
        return 200, headers, source(gzip_ok)

    # -- lifecycle ---------------------------------------------------------------------------------

    def start_in_thread(self) -> None:
        """Bind (raising OSError in the caller if the address is taken), then serve from a daemon thread."""
        if self._server is not None:
            raise RuntimeError("probe server already started")
        server = _HttpServer((self.host, self._requested_port), self)
        self._port = int(server.server_address[1])
        thread = threading.Thread(
            target=server.serve_forever, args=(_SHUTDOWN_POLL_S,), name="gpuop-probes", daemon=True
        )
        thread.start()
        self._server, self._thread = server, thread
        log.info("probe server listening", extra={"address": self.url})

    def stop_thread(self, timeout: float = 5.0) -> None:
        """Stop accepting and close the listening socket; idle keep-alive connections time out."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        thread.join(timeout)
        server.server_close()
        self._server = self._thread = None

    async def start(self) -> None:
        """`start_in_thread` for async callers: binding is immediate and serving never blocks the loop."""
        self.start_in_thread()

    async def stop(self) -> None:
        self.stop_thread()

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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus reuses its connection between scrapes
    timeout = _IDLE_CONNECTION_TIMEOUT_S
    # Headers and body leave in one write (flushed after each request), and without Nagle's delay:
    # a second small write waiting for the client's delayed ACK costs 40 ms per scrape.
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True
    server: _HttpServer

    def do_GET(self) -> None:
        self._answer(send_body=True)

    def do_HEAD(self) -> None:
        self._answer(send_body=False)

    def _answer(self, *, send_body: bool) -> None:
        path = urlsplit(self.path).path
        try:
            status, headers, body = self.server.probes.respond(path, self.headers.get("Accept-Encoding", ""))
        except Exception:
            log.exception("probe request failed", extra={"path": path})
            status, headers, body = _text(500, "internal error\n")
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if send_body:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """No access log: probes every few seconds would drown the service's own lines."""


class _HttpServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    # A TCPServer, not http.server.HTTPServer: that one resolves the host's FQDN when binding, a DNS
    # round trip a pod may wait seconds for.
    allow_reuse_address = True
    daemon_threads = True
    block_on_close = False  # stop() must not wait for idle keep-alive connections

    def __init__(self, address: tuple[str, int], probes: ProbeServer) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.probes = probes
        super().__init__(address, _Handler)
