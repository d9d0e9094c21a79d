"""Rolling driver upgrade at scale: 50 and 200 stub-pod nodes, the real operator as a process.

Each node starts with driver 6.1 installed (the `gpuop.dev/driver.version` label an earlier install
left) and its GPUs in allocatable; a DeviceConfig with 6.1 is rolled out to Ready, then its version
is changed to 6.2 with `maxParallelUpgrades: 20`, `maxUnavailableNodes: 40%` (so the parallel bound
is the one that binds) and no reboot. Every driver Job's stub pod runs for JOB_S seconds (the
simulator's stub outcome hook), so the ideal wall time is `ceil(nodes / 20)` waves of JOB_S.
Measured: wall time from the version change to every node `upgrade-done` against that ideal;
operator writes and node PATCHes per node (constant in cluster size is the target); the operator's
RSS; nodes per state over time (the plot).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import NODES, KubeRest
from gpuop_sim.workloads.objects import Obj
from gpuop_sim.workloads.simkubelet.stub import StubOutcome

from bench.bench_operator import (
    DEVICECONFIGS,
    NAMESPACE,
    _free_port,
    _metric,
    _row,
    _wait,
    install_operands,
    start_operator,
)

ROOT = Path(__file__).resolve().parents[1]
SIZES = (50, 200)
PARALLEL = 20
# Seconds a simulated driver Job runs: a real DKMS build takes minutes; 10 s keeps the bench short
# while the Job, not the operator's step latency, is what a wave should cost.
JOB_S = 10.0
STATE_LABEL = "gpuop.dev/driver-upgrade-state"
VERSION_LABEL = "gpuop.dev/driver.version"
_RESULTS: dict[int, dict[str, Any]] = {}


def _outcome(pod: Obj) -> StubOutcome | None:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if labels.get("app.kubernetes.io/component") == "driver-job":
        return StubOutcome(duration_s=JOB_S)
    return None


def _spec(version: str) -> dict[str, Any]:
    return {
        "driver": {
            "enable": True,
            "version": version,
            "upgradePolicy": {
                "maxParallelUpgrades": PARALLEL,
                "maxUnavailableNodes": "40%",  # the parallel bound binds at both sizes
                "rebootRequired": False,
            },
        }
    }


def _states(rest: KubeRest) -> Counter[str]:
    nodes, _ = rest.list(NODES)
    return Counter((n["metadata"].get("labels") or {}).get(STATE_LABEL, "none") for n in nodes)


def _ready(rest: KubeRest, size: int) -> bool:
    status = rest.get(DEVICECONFIGS, "gpus", NAMESPACE).get("status") or {}
    return (
        status.get("readyNodes") == size
        and (status.get("driver") or {}).get("summary") == f"{size}/{size} at 6.1"
    )


def measure(size: int) -> dict[str, Any]:
    with SimCluster(amd_nodes=size, pods="stub", stub_outcome=_outcome) as cluster:
        rest, server = cluster.api(), cluster.server
        assert server is not None
        install_operands(rest)
        for node in cluster.nodes:
            rest.patch(NODES, node.name, {"metadata": {"labels": {VERSION_LABEL: "6.1"}}})
            rest.patch(NODES, node.name, {"status": {"allocatable": {"amd.com/gpu": "8"}}}, sub="status")
        port = _free_port()
        operator = start_operator(
            cluster.kubeconfig, port, "--driver-job-image", "gpuop/gpuop-operator:bench"
        )
        try:
            body = {"apiVersion": "gpuop.dev/v1alpha1", "kind": "DeviceConfig", "metadata": {"name": "gpus"}}
            rest.create(DEVICECONFIGS, {**body, "spec": _spec("6.1")}, NAMESPACE)
            _wait(lambda: _ready(rest, size), 300, f"{size} nodes ready at 6.1")
            writes_before = _metric(port, "gpuop_operator_api_writes_total")
            before = server.stats()
            started = time.monotonic()
            rest.patch(DEVICECONFIGS, "gpus", {"spec": _spec("6.2")}, NAMESPACE)
            timeline: list[tuple[float, Counter[str]]] = []
            deadline = started + 600
            while time.monotonic() < deadline:
                states = _states(rest)
                timeline.append((time.monotonic() - started, states))
                if states.get("upgrade-done") == size:
                    break
                time.sleep(0.5)
            elapsed = time.monotonic() - started
            if timeline[-1][1].get("upgrade-done") != size:
                raise TimeoutError(f"{size} nodes: upgrade not done after 600 s: {dict(timeline[-1][1])}")
            after = server.stats()
            writes = _metric(port, "gpuop_operator_api_writes_total") - writes_before
            rss = psutil.Process(operator.pid).memory_info().rss
        finally:
            operator.terminate()
            operator.wait(timeout=30)
    patches = after.get(("patch", "nodes"), 0) - before.get(("patch", "nodes"), 0)
    ideal = math.ceil(size / PARALLEL) * JOB_S
    return {
        "seconds": elapsed,
        "ideal": ideal,
        "writes_per_node": writes / size,
        "patches_per_node": patches / size,
        "rss_mb": rss / 2**20,
        "timeline": timeline,
    }


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for size in SIZES:
        r = _RESULTS[size] = measure(size)
        rows += [
            _row(f"{size} nodes: upgrade wall time", r["seconds"], "s", "",
                 f"version change -> all upgrade-done; {PARALLEL} in parallel, {JOB_S:.0f} s Jobs"),
            _row(f"{size} nodes: wall time / ideal waves", r["seconds"] / r["ideal"], "x", "<= 1.2x",
                 f"ideal = ceil({size}/{PARALLEL}) x {JOB_S:.0f} s = {r['ideal']:.0f} s"),
            _row(f"{size} nodes: operator writes per node", r["writes_per_node"], "req/node", "constant",
                 "gpuop_operator_api_writes_total: node patches, Jobs, evictions, status"),
            _row(f"{size} nodes: node PATCHes per node", r["patches_per_node"], "req/node", "constant",
                 "API server request counts"),
            _row(f"{size} nodes: operator RSS", r["rss_mb"], "MiB", "", "psutil, after the upgrade"),
        ]  # fmt: skip
    return rows


def plots(out_dir: Path) -> list[Path]:
    """Nodes per upgrade state over time in the largest run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    size = max(SIZES)
    if size not in _RESULTS:
        _RESULTS[size] = measure(size)
    timeline = _RESULTS[size]["timeline"]
    states = [
        "none",
        "upgrade-required",
        "cordoned",
        "draining",
        "pod-restart",
        "upgrading",
        "validating",
        "upgrade-done",
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "driver-upgrade-states.png"
    fig, ax = plt.subplots(figsize=(7, 3.8))
    times = [t for t, _ in timeline]
    ax.stackplot(times, [[counts.get(s, 0) for _, counts in timeline] for s in states], labels=states)
    ax.set_xlabel("seconds since the version change")
    ax.set_ylabel("nodes")
    ax.set_title(f"driver upgrade of {size} nodes, {PARALLEL} in parallel, {JOB_S:.0f} s Jobs")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8)
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return [target]


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<60} {row['value']:>10.3g} {row['unit']}")
    print(plots(ROOT / "docs" / "img"))
