"""Test runner cost: one self-check run on the MI300X CPX capture, and an idle agent's CPU and memory.

The self-check row is a whole `TestExecutor.run` as the agent does it for a request: open the
backends, enumerate (8 GPUs, 63 KFD partition nodes), open every device node, read telemetry once,
write the run's status and log files; no cluster (the Node update is one PATCH, measured elsewhere).
The idle agent is the real `gpuop-test-runner` console script against the simulated API server with
the unhealthy-GPU watch on (`pollIntervalSeconds` 5, the minimum, so the worst case) and nothing to
test: what it costs a node just to be there.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from gpuop_common.shutdown import Stopping
from gpuop_sim.apiserver import SimApiServer
from gpuop_sim.nodes import build_node_root
from gpuop_test_runner.executor import RunRequest, TestExecutor
from gpuop_test_runner.logstore import RunLogStore
from gpuop_test_runner.metrics import TestRunnerMetrics
from gpuop_test_runner.recipes import SELFCHECK, RecipeBook
from gpuop_test_runner.report import Reporter
from kubernetes import client, config

RUNS = 21
IDLE_S = 30.0
POLL_S = 5  # the smallest pollIntervalSeconds the settings accept
START_TIMEOUT_S = 60.0


def selfcheck_ms(root: Path, logs: Path, runs: int) -> tuple[float, str]:
    """Median ms of a self-check run on every GPU, and the result of the last run."""
    executor = TestExecutor(
        host_root=root,
        store=RunLogStore(logs, keep=5),
        reporter=Reporter(None, "bench", TestRunnerMetrics()),
        stopping=Stopping(),
        tool_path="/usr/bin:/bin",
    )
    request = RunRequest(recipe=RecipeBook().get(SELFCHECK), trigger="MANUAL")
    result = executor.run(request)  # warm: imports, first reads
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        result = executor.run(request)
        samples.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(samples), f"{result.result} on {len(result.gpus)} GPUs"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_ready(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gpuop-test-runner exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("gpuop-test-runner did not become ready in time")


def idle_agent(root: Path, env: dict[str, str], tmp: Path) -> tuple[float, float, float]:
    """(CPU % of one core while idle, RSS MiB, anonymous RSS MiB) after IDLE_S seconds of idling."""
    settings = tmp / "test-runner.yaml"
    settings.write_text(f"trigger: AUTO_UNHEALTHY_GPU_WATCH\npollIntervalSeconds: {POLL_S}\n")
    with SimApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp / "kubeconfig")
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        with client.ApiClient(configuration) as api:
            client.CoreV1Api(api).create_node(client.V1Node(metadata=client.V1ObjectMeta(name="bench-node")))
        port = _free_port()
        script = Path(sys.executable).parent / "gpuop-test-runner"
        argv = [
            str(script), f"--host-root={root}", "--node-name=bench-node", f"--kubeconfig={kubeconfig}",
            f"--config-file={settings}", f"--logs-dir={tmp / 'agent-logs'}", "--bind-address=127.0.0.1",
            f"--probe-port={port}", f"--pod-resources-socket={tmp / 'no-kubelet.sock'}",
            "--log-level=warning",
        ]  # fmt: skip
        proc = subprocess.Popen(argv, env={**os.environ, **env}, stderr=subprocess.DEVNULL)
        try:
            _wait_ready(port, proc)
            process = psutil.Process(proc.pid)
            time.sleep(POLL_S + 1)  # past the health baseline, so only steady polls are counted
            before = sum(process.cpu_times()[:2])
            time.sleep(IDLE_S)
            cpu_percent = (sum(process.cpu_times()[:2]) - before) * 100.0 / IDLE_S
            rss = process.memory_info().rss / 2**20
            anon = _anon_rss_mib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return cpu_percent, rss, anon


def import_floor_mib(env: dict[str, str]) -> tuple[float, float]:
    """(RSS, anonymous RSS) MiB of a bare interpreter that only imported the agent's modules."""
    code = (
        "import gpuop_test_runner.main, pathlib\n"
        "s = dict(l.split(':', 1) for l in pathlib.Path('/proc/self/status').read_text().splitlines())\n"
        "print(int(s['VmRSS'].split()[0]) / 1024, int(s['RssAnon'].split()[0]) / 1024)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, check=True
    )
    rss, anon = done.stdout.split()
    return float(rss), float(anon)


def _anon_rss_mib(pid: int) -> float:
    """RssAnon: the process's own memory, without the file-backed pages of shared libraries."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run(runs: int = RUNS) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-test-runner-") as tmp:
        info = build_node_root("amd-mi300x-cpx", Path(tmp) / "amd")
        run_ms, outcome = selfcheck_ms(info.root, Path(tmp) / "logs", runs)
        cpu, rss, anon = idle_agent(info.root, info.env, Path(tmp))
        floor, floor_anon = import_floor_mib(info.env)
    return [
        {
            "name": "test-runner self-check run, MI300X CPX",
            "value": run_ms,
            "unit": "ms",
            "target": "<= 200",
            "notes": f"median of {runs}; {outcome}; backends opened, 63 partitions, run files written",
        },
        {
            "name": "test-runner idle agent CPU, MI300X CPX",
            "value": cpu,
            "unit": "% of a core",
            "notes": f"over {IDLE_S:.0f} s; health poll every {POLL_S} s (the minimum), Node read every 10 s",
        },
        {
            "name": "test-runner idle agent RSS, MI300X CPX",
            "value": rss,
            "unit": "MiB",
            "target": "<= 60",
            "notes": f"after {IDLE_S:.0f} s idle; {anon:.1f} MiB anonymous (the rest: shared library pages)",
        },
        {
            "name": "test-runner imports alone (RSS floor)",
            "value": floor,
            "unit": "MiB",
            "notes": f"interpreter + the agent's imports, nothing run; {floor_anon:.1f} MiB anonymous",
        },
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
