"""ProbeServer: /healthz, /readyz flips, /metrics from a registry or a pre-rendered body, keep-alive,
thread and loop modes."""

from __future__ import annotations

import asyncio
import gzip
import http.client
import socket
import urllib.error
import urllib.request

import aiohttp
import pytest
from gpuop_common.probes import ProbeServer, wants_gzip
from prometheus_client import CollectorRegistry, Counter, Gauge


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_healthz_and_readyz_flip() -> None:
    with ProbeServer("127.0.0.1", 0) as probes:
        assert probes.port > 0
        assert _get(f"{probes.url}/healthz") == (200, "ok\n")
        status, body = _get(f"{probes.url}/readyz")
        assert status == 503
        assert "starting" in body

        probes.set_ready(True)
        assert _get(f"{probes.url}/readyz") == (200, "ok\n")

        probes.set_ready(False, "kubelet socket gone")
        assert _get(f"{probes.url}/readyz") == (503, "not ready: kubelet socket gone\n")


def test_failing_and_raising_checks_are_named() -> None:
    registered = {"ok": True}

    def broken() -> bool:
        raise RuntimeError("nvml gone")

    with ProbeServer("127.0.0.1", 0, ready=True) as probes:
        probes.add_readiness_check("registered-with-kubelet", lambda: registered["ok"])
        assert _get(f"{probes.url}/readyz")[0] == 200
        registered["ok"] = False
        assert _get(f"{probes.url}/readyz") == (503, "not ready: registered-with-kubelet\n")

        probes.add_liveness_check("gpu-backend", broken)
        assert _get(f"{probes.url}/healthz") == (503, "unhealthy: gpu-backend\n")


def test_metrics_serves_only_the_given_registry() -> None:
    registry = CollectorRegistry()
    Gauge("gpu_health", "GPU health", ["gpu_id"], registry=registry).labels("0").set(1)
    Counter("gpuop_test_runs", "Runs", registry=registry).inc(2)
    with ProbeServer("127.0.0.1", 0, registry=registry) as probes:
        status, body = _get(f"{probes.url}/metrics")
    assert status == 200
    assert 'gpu_health{gpu_id="0"} 1.0' in body
    assert "gpuop_test_runs_total 2.0" in body
    # The process-global registry's default collectors must not leak in.
    assert "process_cpu_seconds_total" not in body
    assert "python_gc_objects_collected_total" not in body


def test_no_metrics_route_without_registry() -> None:
    with ProbeServer("127.0.0.1", 0) as probes:
        assert _get(f"{probes.url}/metrics")[0] == 404


def test_port_in_use_raises_in_caller() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            ProbeServer("127.0.0.1", port).start_in_thread()


def test_runs_on_the_callers_loop() -> None:
    async def scenario() -> tuple[int, int]:
        probes = ProbeServer("127.0.0.1", 0, ready=True)
        await probes.start()
        try:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{probes.url}/readyz") as ready:
                    ready_status = ready.status
                probes.set_ready(False)
                async with session.get(f"{probes.url}/readyz") as not_ready:
                    return ready_status, not_ready.status
        finally:
            await probes.stop()

    assert asyncio.run(scenario()) == (200, 503)


def _get_with(url: str, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_prerendered_metrics_are_503_until_a_source_is_set_then_served_with_gzip() -> None:
    asked: list[bool] = []

    def exposition(gzip_ok: bool) -> bytes:
        asked.append(gzip_ok)
        body = b"gpu_health 1.0\n"
        return gzip.compress(body) if gzip_ok else body

    with ProbeServer("127.0.0.1", 0, prerendered_metrics=True) as probes:
        assert _get(f"{probes.url}/metrics") == (503, "no metrics yet\n")
        probes.set_metrics_source(exposition)
        status, headers, body = _get_with(f"{probes.url}/metrics", {})
        assert (status, body) == (200, b"gpu_health 1.0\n")
        assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
        assert "Content-Encoding" not in headers
        status, headers, body = _get_with(f"{probes.url}/metrics", {"Accept-Encoding": "gzip, br"})
        assert status == 200 and headers["Content-Encoding"] == "gzip"
        assert gzip.decompress(body) == b"gpu_health 1.0\n"
        refused = _get_with(f"{probes.url}/metrics", {"Accept-Encoding": "gzip;q=0"})
        assert refused[2] == b"gpu_health 1.0\n"
    assert asked == [False, True, False]


def test_health_aliases_answer_like_healthz() -> None:
    with ProbeServer("127.0.0.1", 0, health_aliases=("/health",)) as probes:
        assert _get(f"{probes.url}/health") == (200, "ok\n")
        probes.add_liveness_check("gpu-backend", lambda: False)
        assert _get(f"{probes.url}/health") == (503, "unhealthy: gpu-backend\n")
        assert _get(f"{probes.url}/healthz") == (503, "unhealthy: gpu-backend\n")


def test_metrics_source_needs_the_prerendered_mode_and_options_are_checked() -> None:
    with pytest.raises(RuntimeError, match="prerendered_metrics"):
        ProbeServer("127.0.0.1", 0).set_metrics_source(lambda _gzip: b"")
    with pytest.raises(ValueError, match="not both"):
        ProbeServer("127.0.0.1", 0, registry=CollectorRegistry(), prerendered_metrics=True)
    with pytest.raises(ValueError, match="/readyz"):
        ProbeServer("127.0.0.1", 0, health_aliases=("/readyz",))


@pytest.mark.parametrize(
    ("header", "expected"),
    [("gzip", True), ("GZIP;q=0.5", True), ("deflate, gzip;q=1.0", True), ("gzip;q=0", False),
     ("gzip;q=0.0", False), ("*", True), ("identity", False), ("", False)],
)  # fmt: skip
def test_wants_gzip(header: str, expected: bool) -> None:
    assert wants_gzip(header) is expected


def test_keep_alive_serves_many_requests_on_one_connection() -> None:
    with ProbeServer("127.0.0.1", 0, ready=True) as probes:
        connection = http.client.HTTPConnection("127.0.0.1", probes.port, timeout=5)
        try:
            answers, sockets = [], []
            for path in ("/healthz", "/readyz", "/nowhere", "/healthz?verbose=1"):
                connection.request("GET", path)
                response = connection.getresponse()
                answers.append((response.status, response.read()))
                sockets.append(connection.sock)
            assert all(sock is sockets[0] for sock in sockets)  # never reconnected: kept alive
            connection.request("HEAD", "/healthz")
            head = connection.getresponse()
            assert (head.status, head.getheader("Content-Length"), head.read()) == (200, "3", b"")
        finally:
            connection.close()
    assert answers == [(200, b"ok\n"), (200, b"ok\n"), (404, b"not found\n"), (200, b"ok\n")]


def test_a_raising_metrics_source_is_a_500_and_the_server_keeps_serving() -> None:
    def broken(_gzip: bool) -> bytes:
        raise RuntimeError("snapshot bug")

    with ProbeServer("127.0.0.1", 0, prerendered_metrics=True) as probes:
        probes.set_metrics_source(broken)
        assert _get(f"{probes.url}/metrics") == (500, "internal error\n")
        assert _get(f"{probes.url}/healthz") == (200, "ok\n")


def test_stop_releases_the_port_for_a_restart() -> None:
    probes = ProbeServer("127.0.0.1", 0)
    probes.start_in_thread()
    port = probes.port
    probes.stop_thread()
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5)
    with ProbeServer("127.0.0.1", port) as again:
        assert _get(f"{again.url}/healthz") == (200, "ok\n")
