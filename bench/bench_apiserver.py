"""Simulated API server throughput through the real `kubernetes` client, and watch fan-out latency.

The operator benchmark reconciles 1,000 simulated nodes, so the server must answer GET/LIST/PATCH
for that many Nodes fast enough not to be the bottleneck; watch fan-out latency bounds how quickly
10 agents see a node label change.
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from gpuop_sim.apiserver import SimApiServer
from kubernetes import client

NODES = 1000
WATCHERS = 10
WRITES = 200
SECONDS = 2.0


def _rate(call: Callable[[], object], seconds: float) -> tuple[float, int]:
    call()
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        call()
        count += 1
    return count / (time.perf_counter() - start), count


def _watch_latencies(srv: SimApiServer, core: client.CoreV1Api) -> list[float]:
    """Write a node label WRITES times; each of WATCHERS raw watch streams timestamps its arrival."""
    meta = core.list_node(limit=1).metadata
    assert meta is not None
    rv = meta.resource_version
    sent: dict[str, float] = {}
    arrivals: list[list[tuple[str, float]]] = [[] for _ in range(WATCHERS)]
    ready = threading.Barrier(WATCHERS + 1)

    def watch(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        conn.request(
            "GET",
            f"/api/v1/nodes?watch=true&resourceVersion={rv}&fieldSelector=metadata.name=bench-node-0&timeoutSeconds=60",
        )
        resp = conn.getresponse()
        ready.wait()
        while len(arrivals[i]) < WRITES:
            line = resp.readline()
            if not line:
                break
            seq = json.loads(line)["object"]["metadata"]["labels"].get("bench/seq")
            if seq is not None:
                arrivals[i].append((seq, time.perf_counter()))
        conn.close()

    threads = [threading.Thread(target=watch, args=(i,), daemon=True) for i in range(WATCHERS)]
    for t in threads:
        t.start()
    ready.wait()
    time.sleep(0.2)  # the streams are open once the 200 headers arrived; let the loop settle
    for n in range(WRITES):
        seq = str(n)
        sent[seq] = time.perf_counter()
        core.patch_node("bench-node-0", {"metadata": {"labels": {"bench/seq": seq}}})
    for t in threads:
        t.join(timeout=30)
    return [(at - sent[seq]) * 1000.0 for per in arrivals for seq, at in per if seq in sent]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with SimApiServer(controllers=False) as srv:
        api = client.ApiClient(client.Configuration(host=srv.url))
        core = client.CoreV1Api(api)
        start = time.perf_counter()
        for i in range(NODES):
            core.create_node(
                client.V1Node(
                    metadata=client.V1ObjectMeta(
                        name=f"bench-node-{i}", labels={"amd.com/gpu.present": "true"}
                    )
                )
            )
        create_s = time.perf_counter() - start
        rows.append(
            {
                "name": "apiserver create Node",
                "value": NODES / create_s,
                "unit": "req/s",
                "notes": f"{NODES} nodes, sequential",
            }
        )
        rate, count = _rate(lambda: core.read_node("bench-node-500"), SECONDS)
        rows.append(
            {
                "name": "apiserver GET one Node",
                "value": rate,
                "unit": "req/s",
                "notes": f"{count} requests, 1 client",
            }
        )
        rate, count = _rate(core.list_node, SECONDS * 1.5)
        rows.append(
            {
                "name": f"apiserver LIST {NODES} Nodes",
                "value": rate,
                "unit": "req/s",
                "notes": f"{count} lists, full deserialisation by the client",
            }
        )
        url = f"{srv.url}/api/v1/nodes"
        rate, count = _rate(lambda: urllib.request.urlopen(url).read(), SECONDS)
        rows.append(
            {
                "name": f"apiserver LIST {NODES} Nodes (raw HTTP)",
                "value": rate,
                "unit": "req/s",
                "notes": f"{count} lists, server cost only",
            }
        )
        seq = iter(range(10**9))
        rate, count = _rate(
            lambda: core.patch_node(
                f"bench-node-{next(seq) % NODES}", {"metadata": {"labels": {"bench/x": "y"}}}
            ),
            SECONDS,
        )
        rows.append(
            {
                "name": "apiserver PATCH Node label",
                "value": rate,
                "unit": "req/s",
                "notes": f"{count} strategic-merge patches",
            }
        )
        latencies = _watch_latencies(srv, core)
        notes = f"{WATCHERS} watchers x {WRITES} label patches; {len(latencies)} deliveries"
        rows.append(
            {
                "name": "apiserver watch fan-out p50",
                "value": statistics.median(latencies),
                "unit": "ms",
                "notes": notes,
            }
        )
        rows.append(
            {
                "name": "apiserver watch fan-out p99",
                "value": _percentile(latencies, 0.99),
                "unit": "ms",
                "notes": notes,
            }
        )
        api.close()  # type: ignore[no-untyped-call]
    return rows


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<36} {row['value']:>10.1f} {row['unit']:<6} {row['notes']}")
