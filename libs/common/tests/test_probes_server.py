"""ProbeServer: /healthz, /readyz flips, /metrics from a custom registry, thread and loop modes."""

from __future__ import annotations

import asyncio
import socket
import urllib.error
import urllib.request

import aiohttp
import pytest
from gpuop_common.probes import ProbeServer
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
