"""The exporter's HTTP listener: `/metrics` from the cached snapshot plus the shared probe endpoints.

It is the common ProbeServer (same /healthz and /readyz semantics, same lifecycle) with `/metrics`
served from pre-rendered bytes instead of rendering a registry per scrape: rendering 1,000+ series
costs tens of milliseconds, copying them costs microseconds. `/health` is dcgm-exporter's path. The
body is the classic text format 0.0.4, what both vendor exporters serve and every Prometheus reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from gpuop_common.probes import ProbeServer
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

log = logging.getLogger(__name__)

Exposition = Callable[[bool], bytes]  # gzip wanted -> body


def wants_gzip(accept_encoding: str) -> bool:
    """True when the client accepts gzip (`gzip;q=0` refuses it)."""
    for part in accept_encoding.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            q = params.strip().removeprefix("q=")
            return not (params and q.replace(".", "", 1).isdigit() and float(q) == 0.0)
    return False


class ExporterServer(ProbeServer):
    def __init__(self, host: str, port: int, exposition: Exposition) -> None:
        super().__init__(host, port)
        self._exposition = exposition

    async def _serve_metrics(self, request: web.Request) -> web.Response:
        gzip_ok = wants_gzip(request.headers.get("Accept-Encoding", ""))
        body = self._exposition(gzip_ok)
        headers = {"Content-Type": CONTENT_TYPE_PLAIN_0_0_4}
        if gzip_ok:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    def _app(self) -> web.Application:
        app = super()._app()
        app.router.add_get("/metrics", self._serve_metrics)
        app.router.add_get("/health", self._healthz)
        return app
