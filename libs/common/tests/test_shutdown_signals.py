"""Graceful shutdown: real subprocesses get SIGTERM and leave promptly at a safe point."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest
from gpuop_common.settings import AgentSettings
from gpuop_common.shutdown import ServiceContext, Stopping, run_periodic, run_service

SERVICE = textwrap.dedent(
    """
    import sys
    from gpuop_common.settings import AgentSettings
    from gpuop_common.shutdown import run_service

    MODE = sys.argv[1]

    def main(ctx):
        ctx.probes.set_ready(True)
        print(f"serving {ctx.probes.port}", flush=True)
        if MODE == "wedged":
            import threading
            threading.Event().wait()  # ignores ctx.stopping on purpose
        while not ctx.stopping.wait(0.05):
            pass
        print("left at a safe point", flush=True)
        return 0

    async def amain(ctx):
        print(f"serving {ctx.probes.port}", flush=True)
        while not await ctx.stopping.wait_async(0.05):
            pass
        print("left at a safe point", flush=True)

    timeout = float(sys.argv[2]) if len(sys.argv) > 2 else 25.0
    sys.exit(run_service(AgentSettings, amain if MODE == "async" else main, service="example",
                         argv=[], shutdown_timeout=timeout))
    """
)


def _start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    script = tmp_path / "service.py"
    script.write_text(SERVICE)
    env = dict(os.environ, GPUOP_BIND_ADDRESS="127.0.0.1", GPUOP_PROBE_PORT="0", NODE_NAME="node-a")
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


class Lines:
    """Collects a pipe's lines on a thread, so tests can wait for one without racing buffered reads."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._thread.start()

    def _pump(self, stream: IO[str]) -> None:
        for line in stream:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()

    def wait_for(self, predicate: Callable[[str], bool], timeout: float = 20.0) -> str:
        with self._changed:
            found = self._changed.wait_for(lambda: next(filter(predicate, self.lines), None), timeout)
        if found is None:
            raise AssertionError(f"no matching line in time; got {self.lines}")
        return found

    def text(self) -> str:
        self._thread.join(10)
        return "".join(self.lines)


def _outputs(process: subprocess.Popen[str]) -> tuple[Lines, Lines]:
    assert process.stdout is not None and process.stderr is not None
    return Lines(process.stdout), Lines(process.stderr)


def _is_record(message: str) -> Callable[[str], bool]:
    return lambda line: json.loads(line).get("message") == message


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_sigterm_exits_cleanly_and_promptly(tmp_path: Path, mode: str) -> None:
    process = _start(tmp_path, mode)
    stdout, stderr = _outputs(process)
    try:
        stdout.wait_for(lambda line: line.startswith("serving"))
        sent = time.monotonic()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
        elapsed = time.monotonic() - sent
    finally:
        process.kill()
    out, err = stdout.text(), stderr.text()
    assert process.returncode == 0, err
    assert "left at a safe point" in out
    assert elapsed < 5
    records = [json.loads(line) for line in err.splitlines()]
    assert [r["message"] for r in records if r["message"] in {"stopping", "stopped"}] == [
        "stopping",
        "stopped",
    ]
    assert all(r["service"] == "example" and r["node"] == "node-a" for r in records)


@pytest.mark.slow
def test_second_signal_forces_exit(tmp_path: Path) -> None:
    process = _start(tmp_path, "wedged")
    stdout, stderr = _outputs(process)
    try:
        stdout.wait_for(lambda line: line.startswith("serving"))
        process.send_signal(signal.SIGTERM)
        stderr.wait_for(_is_record("stopping"))
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 1


@pytest.mark.slow
def test_hard_timeout_forces_exit(tmp_path: Path) -> None:
    process = _start(tmp_path, "wedged", "0.3")
    stdout, stderr = _outputs(process)
    try:
        stdout.wait_for(lambda line: line.startswith("serving"))
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=10)
    finally:
        process.kill()
    assert process.returncode == 1
    assert "did not stop within 0.3s" in stderr.text()


def test_stopping_wakes_thread_and_async_waiters() -> None:
    stopping = Stopping()
    assert stopping.wait(0.01) is False

    async def waiter() -> bool:
        return await stopping.wait_async(10)

    async def scenario() -> bool:
        task = asyncio.create_task(waiter())
        await asyncio.sleep(0)
        threading.Thread(target=stopping.set, args=("test",)).start()
        return await asyncio.wait_for(task, 5)

    assert asyncio.run(scenario()) is True
    assert stopping.wait(0) is True
    assert stopping.reason == "test"


def test_run_periodic_stops_at_safe_point_and_survives_failures() -> None:
    stopping = Stopping()
    calls: list[int] = []

    def step() -> None:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("transient")
        if len(calls) == 3:
            stopping.set("done")

    assert run_periodic(step, interval=0.001, stopping=stopping) == 0
    assert calls == [0, 1, 2]


def test_run_periodic_once_reports_failure() -> None:
    def failing() -> None:
        raise RuntimeError("broken")

    assert run_periodic(failing, interval=60, stopping=Stopping(), once=True) == 1
    assert run_periodic(lambda: None, interval=60, stopping=Stopping(), once=True) == 0


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_run_service_returns_mains_exit_code_and_serves_probes(restore_logging: None) -> None:
    seen: dict[str, object] = {}

    def main(ctx: ServiceContext[AgentSettings]) -> int:
        ctx.probes.set_ready(True)
        with urllib.request.urlopen(f"{ctx.probes.url}/readyz", timeout=5) as response:
            seen["readyz"] = response.status
        seen["node"] = ctx.settings.node_name
        return 3

    argv = ["--bind-address", "127.0.0.1", "--probe-port", "0", "--node-name", "n1"]
    assert run_service(AgentSettings, main, service="example", argv=argv) == 3
    assert seen == {"readyz": 200, "node": "n1"}


def test_run_service_reports_a_crashing_main(restore_logging: None) -> None:
    def main(_ctx: ServiceContext[AgentSettings]) -> None:
        raise RuntimeError("bug")

    argv = ["--bind-address", "127.0.0.1", "--probe-port", "0"]
    assert run_service(AgentSettings, main, service="example", argv=argv) == 1


def test_run_service_fails_cleanly_when_the_probe_port_is_taken(restore_logging: None) -> None:
    called = []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        argv = ["--bind-address", "127.0.0.1", "--probe-port", str(taken.getsockname()[1])]
        assert run_service(AgentSettings, called.append, service="example", argv=argv) == 1
    assert called == []


class OnePortSettings(AgentSettings):
    """A service whose one listener is `--port` (like the metrics exporter)."""

    port: int = 0


def test_run_service_serves_probes_and_prerendered_metrics_on_the_services_own_port(
    restore_logging: None,
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        free_port = probe.getsockname()[1]
    seen: dict[str, object] = {}

    def main(ctx: ServiceContext[OnePortSettings]) -> int:
        seen["port"] = ctx.probes.port
        ctx.probes.set_metrics_source(lambda _gzip: b"up 1.0\n")
        ctx.probes.set_ready(True)
        for path in ("/metrics", "/health", "/readyz"):
            with urllib.request.urlopen(f"{ctx.probes.url}{path}", timeout=5) as response:
                seen[path] = (response.status, response.read())
        return 0

    argv = ["--bind-address", "127.0.0.1", "--port", str(free_port)]
    code = run_service(
        OnePortSettings,
        main,
        service="example",
        argv=argv,
        probe_port=lambda settings: settings.port,
        prerendered_metrics=True,
        health_aliases=("/health",),
    )
    assert code == 0
    assert seen == {
        "port": free_port,
        "/metrics": (200, b"up 1.0\n"),
        "/health": (200, b"ok\n"),
        "/readyz": (200, b"ok\n"),
    }
