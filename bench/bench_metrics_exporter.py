"""Metrics exporter: scrape latency at 10 scrapes/s, collection cost per interval, RSS over 10,000 scrapes.

The exporter runs as its real console script (one process per simulated node root) and is scraped
over HTTP with gzip, as Prometheus does, on a kept-alive connection. Collections run every 5 s
during the paced runs, so the tail includes scrapes that overlap a collection.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil
from gpuop_common.config import MetricsExporterConfig
from gpuop_common.gpu import open_backends
from gpuop_metrics_exporter.collector import MetricsCollector
from gpuop_sim.nodes import NodeRootInfo, build_node_root

Row = dict[str, Any]
PACED_SCRAPES = 100  # at 10/s: 10 s per profile
PACE_S = 0.1
RSS_SCRAPES = 10_000
COLLECTIONS = 7
START_TIMEOUT_S = 60.0


@contextmanager
def exporter_process(info: NodeRootInfo, workdir: Path, interval_s: int) -> Iterator[tuple[str, int, int]]:
    """Start the console script on the node root; yields (host, port, pid)."""
    config = workdir / f"{info.profile}.yaml"
    config.write_text(f"collectionIntervalSeconds: {interval_s}\n")
    script = Path(sys.executable).parent / "gpuop-metrics-exporter"
    argv = [
        str(script), f"--host-root={info.root}", "--bind-address=127.0.0.1", "--port=0",
        f"--config-file={config}", f"--pod-resources-socket={workdir / 'none.sock'}",
        "--node-name=bench", "--log-level=warning",
    ]  # fmt: skip
    # The URL line is logged at info; run at warning and find the port from the process instead.
    proc = subprocess.Popen(argv, env={**os.environ, **info.env}, stderr=subprocess.PIPE, text=True)
    drain = threading.Thread(target=lambda: proc.stderr and proc.stderr.read(), daemon=True)
    drain.start()
    try:
        host, port = "127.0.0.1", _wait_for_port(proc)
        _wait_ready(host, port)
        yield host, port, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _wait_for_port(proc: subprocess.Popen[str]) -> int:
    deadline = time.monotonic() + START_TIMEOUT_S
    me = psutil.Process(proc.pid)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exporter exited with {proc.returncode}")
        listening = sorted(c.laddr.port for c in me.net_connections("tcp") if c.status == psutil.CONN_LISTEN)
        # Two listeners: the runtime's probe server (ephemeral) and the exporter's; ask each.
        for port in listening:
            if _get(("127.0.0.1", port), "/metrics")[0] == 200:
                return port
        time.sleep(0.1)
    raise RuntimeError("exporter did not start listening in time")


def _get(address: tuple[str, int], path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection(*address, timeout=5)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        return response.status, response.read()
    except OSError:
        return 0, b""
    finally:
        connection.close()


def _wait_ready(host: str, port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _get((host, port), "/readyz")[0] == 200:
            return
        time.sleep(0.1)
    raise RuntimeError("exporter did not become ready in time")


def scrape_latencies(host: str, port: int, count: int, pace_s: float | None) -> tuple[list[float], int]:
    """Milliseconds per scrape (request to last byte) and the gzip body size."""
    connection = http.client.HTTPConnection(host, port, timeout=10)
    headers = {"Accept-Encoding": "gzip"}
    samples: list[float] = []
    size = 0
    start = time.perf_counter()
    for i in range(count):
        if pace_s is not None:
            delay = start + i * pace_s - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        began = time.perf_counter()
        connection.request("GET", "/metrics", headers=headers)
        response = connection.getresponse()
        body = response.read()
        samples.append((time.perf_counter() - began) * 1000.0)
        if response.status != 200:
            raise RuntimeError(f"scrape {i} answered {response.status}")
        size = len(body)
    connection.close()
    return samples, size


def anon_rss_mib(pid: int) -> float:
    """RssAnon: the process's own memory, without the file-backed pages of shared libraries."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def collection_ms(info: NodeRootInfo) -> tuple[float, int]:
    """Median wall time of one collection (read + build + render) in-process, and the series count."""
    os.environ.update(info.env)
    collector = MetricsCollector(
        lambda: open_backends(info.root), hostname="bench", config=MetricsExporterConfig()
    )
    collector.collect_once()  # open the backends, warm caches
    times = []
    for _ in range(COLLECTIONS):
        began = time.perf_counter()
        snapshot = collector.collect_once()
        times.append((time.perf_counter() - began) * 1000.0)
    collector.stop()
    series = sum(1 for line in snapshot.body.splitlines() if line and not line.startswith(b"#"))
    return statistics.median(times), series


def row(name: str, value: float, unit: str, notes: str, target: str = "") -> Row:
    return {"name": name, "value": value, "unit": unit, "target": target, "notes": notes}


def run() -> list[Row]:
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="bench-exporter-") as tmp:
        work = Path(tmp)
        nodes = {
            "8 GPUs (H100x8)": (build_node_root("nvidia-h100x8", work / "nvidia"), 10.0),
            "MI300X CPX (63 partitions)": (build_node_root("amd-mi300x-cpx", work / "amd"), 30.0),
        }
        for label, (info, target_ms) in nodes.items():
            cost, series = collection_ms(info)
            notes = f"median of {COLLECTIONS}; read + build + render once; {series} series"
            rows.append(row(f"collection {label}", cost, "ms", notes))
            with exporter_process(info, work, interval_s=5) as (host, port, _pid):
                samples, size = scrape_latencies(host, port, PACED_SCRAPES, PACE_S)
            notes = f"{PACED_SCRAPES} scrapes at 10/s, gzip body {size / 1024:.0f} KiB, collecting every 5 s"
            rows.append(row(f"scrape p50 {label}", statistics.median(samples), "ms", notes))
            rows.append(
                row(f"scrape p99 {label}", percentile(samples, 0.99), "ms", notes, f"<= {target_ms:g} ms")
            )
        info = nodes["MI300X CPX (63 partitions)"][0]
        with exporter_process(info, work, interval_s=15) as (host, port, pid):
            process = psutil.Process(pid)
            at_start, anon_start = process.memory_info().rss / 2**20, anon_rss_mib(pid)
            scrape_latencies(host, port, 1000, None)
            after_1k = process.memory_info().rss / 2**20
            began = time.perf_counter()
            scrape_latencies(host, port, RSS_SCRAPES - 1000, None)
            rate = (RSS_SCRAPES - 1000) / (time.perf_counter() - began)
            after_10k, anon_10k = process.memory_info().rss / 2**20, anon_rss_mib(pid)
        notes = f"interpreter + imports dominate; anonymous part {anon_start:.1f} MiB"
        rows.append(row("RSS at start (MI300X CPX, first snapshot served)", at_start, "MiB", notes))
        notes = f"unpaced, {rate:.0f} scrapes/s; anonymous part {anon_10k:.1f} MiB"
        rows.append(row("RSS after 10,000 scrapes (MI300X CPX)", after_10k, "MiB", notes, "<= 60 MiB"))
        notes = f"RSS after 1,000 scrapes {after_1k:.1f} MiB"
        growth = after_10k - after_1k
        rows.append(row("RSS growth 1,000 -> 10,000 scrapes", growth, "MiB", notes, "~0 (no growth)"))
    return rows


if __name__ == "__main__":
    print(json.dumps(run(), indent=1))
