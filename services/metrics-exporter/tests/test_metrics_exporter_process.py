"""The console script as a real process: HTTP endpoints, pod labels over the real socket, hot reload,
SIGTERM, and `--once`."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo

pytestmark = pytest.mark.slow
WAIT_S = 30.0


class ExporterProcess:
    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def records(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in list(self.lines) if line.startswith("{")]

    def wait_for(self, predicate: Callable[[], object], what: str, timeout: float = WAIT_S) -> object:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = predicate()
            if result:
                return result
            if self.proc.poll() is not None:
                raise AssertionError(f"exporter exited with {self.proc.returncode}: {''.join(self.lines)}")
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; log: {''.join(self.lines[-20:])}")

    @property
    def url(self) -> str:
        def logged() -> str | None:
            return next(
                (str(r["url"]) for r in self.records() if r.get("message") == "serving metrics"), None
            )

        found = self.wait_for(logged, "the 'serving metrics' log line")
        return str(found).removesuffix("/metrics")

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status), dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return int(exc.code), dict(exc.headers), exc.read()

    def metrics(self) -> str:
        status, _, body = self.get("/metrics")
        assert status == 200
        return body.decode()


@pytest.fixture
def start_exporter(tmp_path: Path) -> Iterator[Callable[..., ExporterProcess]]:
    started: list[ExporterProcess] = []

    def start(info: NodeRootInfo, *args: str) -> ExporterProcess:
        argv = [
            sys.executable, "-m", "gpuop_metrics_exporter.main", f"--host-root={info.root}",
            "--bind-address=127.0.0.1", "--port=0", "--node-name=node-a", "--config-poll-interval=0.2", *args,
        ]  # fmt: skip
        proc = subprocess.Popen(
            argv, env={**os.environ, **info.env}, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        exporter = ExporterProcess(proc)
        started.append(exporter)
        return exporter

    yield start
    for exporter in started:
        if exporter.proc.poll() is None:
            exporter.proc.kill()
        exporter.proc.wait(timeout=10)


def test_serves_metrics_and_probes_attributes_pods_and_stops_on_sigterm(
    start_exporter, gpu_node_root, kubelet_emulator: KubeletEmulator, tmp_path: Path
):
    info = gpu_node_root("amd-mi210x8", "node-a")
    config = tmp_path / "config.yaml"
    config.write_text("collectionIntervalSeconds: 1\nextraLabels: {cluster_name: lab}\n")
    kubelet_emulator.assign("train", "ml", "main", "amd.com/gpu", [info.pci_addresses[1]])
    exporter = start_exporter(
        info, f"--config-file={config}", f"--pod-resources-socket={kubelet_emulator.pod_resources_socket}"
    )
    exporter.wait_for(lambda: exporter.get("/readyz")[0] == 200, "ready")
    # One listener: the shared probe server is the one serving /metrics.
    started = next(r for r in exporter.records() if r.get("message") == "started")
    assert exporter.url.endswith(f":{started['probe_port']}")
    assert exporter.get("/healthz")[0] == 200
    assert exporter.get("/health")[0] == 200
    text = exporter.metrics()
    assert 'pod="train"' in text
    assert 'cluster_name="lab"' in text
    status, headers, body = exporter.get("/metrics", {"Accept-Encoding": "gzip"})
    assert status == 200
    assert headers["Content-Encoding"] == "gzip"
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert b"gpu_junction_temperature{" in gzip.decompress(body)
    # The pod ends; within a collection interval its labels are gone.
    kubelet_emulator.release("train", "ml")
    exporter.wait_for(lambda: 'pod="train"' not in exporter.metrics(), "pod labels to clear")
    # A ConfigMap edit applies without a restart.
    config.write_text("collectionIntervalSeconds: 1\nnamingSets: [neutral]\n")
    exporter.wait_for(lambda: "gpu_junction_temperature{" not in exporter.metrics(), "the config reload")
    assert "gpuop_gpu_temperature_celsius{" in exporter.metrics()
    exporter.proc.send_signal(signal.SIGTERM)
    assert exporter.proc.wait(timeout=WAIT_S) == 0


def test_once_prints_one_exposition(gpu_node_root, tmp_path: Path):
    info = gpu_node_root("nvidia-h100x8", "node-a")
    done = subprocess.run(
        [sys.executable, "-m", "gpuop_metrics_exporter.main", f"--host-root={info.root}", "--once",
         "--node-name=node-a", f"--config-file={tmp_path / 'none.yaml'}",
         f"--pod-resources-socket={tmp_path / 'none.sock'}"],
        env={**os.environ, **info.env}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("DCGM_FI_DEV_GPU_TEMP{") == 8
    assert "gpuop_exporter_pod_resources_up 0.0" in done.stdout


def test_bad_flag_is_one_line_and_exit_2():
    # One listener: --port serves metrics and probes, so the common --probe-port is refused.
    done = subprocess.run(
        [sys.executable, "-m", "gpuop_metrics_exporter.main", "--port=5000", "--probe-port=5001"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--probe-port is not an exporter setting" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
