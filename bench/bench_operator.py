"""Operator at scale: 100 and 1,000 stub-pod nodes of a simulated cluster.

For each size, the umbrella chart's CRD, operand DaemonSets and ConfigMaps are rendered by the real
helm and created on the simulated cluster, the real `gpuop-operator` runs as a process, and one
DeviceConfig selecting every node is created. Measured: time from create to Ready with every node
`ready`; node PATCHes per node (from the API server's request counts; the stub kubelets do not
patch nodes, so these are the operator's); all operator writes per node (its own
`gpuop_operator_api_writes_total`); writes per minute over a quiet window afterwards; the
operator's resident memory. Node roots are not built (stub pods never read them), which keeps a
1,000-node cluster cheap to start and stop.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from gpuop_sim import helm
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, DAEMONSETS, NAMESPACES, KubeRest, Resource

ROOT = Path(__file__).resolve().parents[1]
UMBRELLA = ROOT / "charts" / "gpu-operator"
NAMESPACE = "gpu-operator"
SIZES = (100, 1000)
QUIET_S = 5.0
CRDS = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False)
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
SERVICEACCOUNTS = Resource("v1", "serviceaccounts", "ServiceAccount")
_RESULTS: dict[int, dict[str, float]] = {}


def install_operands(rest: KubeRest, chart: Path = UMBRELLA) -> None:
    """The umbrella's CRD, ServiceAccounts, ConfigMaps and DaemonSets, created as helm renders them."""
    helm.dependency_build(chart)
    manifests = helm.template(
        chart, namespace=NAMESPACE, values=["operator.enabled=false", "deviceConfigs=null"]
    )
    rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    where = {
        "CustomResourceDefinition": CRDS,
        "ServiceAccount": SERVICEACCOUNTS,
        "ConfigMap": CONFIGMAPS,
        "DaemonSet": DAEMONSETS,
    }
    for manifest in manifests:
        resource = where.get(manifest["kind"])
        hook = "helm.sh/hook" in (manifest["metadata"].get("annotations") or {})
        if resource is not None and not hook:
            rest.create(resource, manifest, None if resource is CRDS else NAMESPACE)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _metric(port: int, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))


def _wait(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


def start_operator(kubeconfig: Path, port: int, *extra: str) -> subprocess.Popen[bytes]:
    """The real operator as a process against `kubeconfig`, returned once /readyz answers 200."""
    script = Path(sys.executable).parent / "gpuop-operator"
    args = [
        str(script), "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE,
        "--release", "gpuop", "--no-leader-elect", "--bind-address", "127.0.0.1",
        "--probe-port", str(port), "--log-level", "warning", *extra,
    ]  # fmt: skip
    operator = subprocess.Popen(args, env={**os.environ}, stderr=subprocess.DEVNULL)
    try:
        _wait(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).status == 200,
            60,
            "operator ready",
        )
    except BaseException:
        operator.kill()
        operator.wait(timeout=30)
        raise
    return operator


def _ready(rest: KubeRest, size: int) -> bool:
    dc = rest.get(DEVICECONFIGS, "all-gpus", NAMESPACE)
    status = dc.get("status") or {}
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in status.get("conditions") or [])
    return ready and status.get("readyNodes") == size


def measure(size: int) -> dict[str, float]:
    with SimCluster(amd_nodes=size // 2, nvidia_nodes=size - size // 2, pods="stub") as cluster:
        rest, server = cluster.api(), cluster.server
        assert server is not None
        install_operands(rest)
        port = _free_port()
        operator = start_operator(cluster.kubeconfig, port)
        try:
            before = server.stats()
            started = time.monotonic()
            body = {
                "apiVersion": "gpuop.dev/v1alpha1",
                "kind": "DeviceConfig",
                "metadata": {"name": "all-gpus"},
                "spec": {},
            }
            rest.create(DEVICECONFIGS, body, NAMESPACE)
            _wait(lambda: _ready(rest, size), 300, f"{size} nodes ready")
            elapsed = time.monotonic() - started
            after = server.stats()
            writes = _metric(port, "gpuop_operator_api_writes_total")
            time.sleep(QUIET_S)
            quiet_writes = _metric(port, "gpuop_operator_api_writes_total") - writes
            process = psutil.Process(operator.pid)
            rss = process.memory_info().rss
            cpu = sum(process.cpu_times()[:2])
        finally:
            operator.terminate()
            operator.wait(timeout=30)
    patches = after.get(("patch", "nodes"), 0) - before.get(("patch", "nodes"), 0)
    return {
        "seconds": elapsed,
        "patches_per_node": patches / size,
        "writes_per_node": writes / size,
        "steady_writes_per_min": quiet_writes * 60.0 / QUIET_S,
        "rss_mb": rss / 2**20,
        "cpu_s": cpu,
    }


def _row(name: str, value: float, unit: str, target: str = "", notes: str = "") -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "target": target, "notes": notes}


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for size in SIZES:
        r = _RESULTS[size] = measure(size)
        big = size == 1000
        rows += [
            _row(f"{size} nodes: DeviceConfig create -> all nodes ready", r["seconds"], "s",
                 "<= 30 s" if big else "", "stub pods; 2 stages + ready mark"),
            _row(f"{size} nodes: node PATCHes per node", r["patches_per_node"], "req/node", "constant",
                 "API server request counts"),
            _row(f"{size} nodes: operator writes per node", r["writes_per_node"], "req/node", "constant",
                 "nodes + status + ConfigMaps + finalizer"),
            _row(f"{size} nodes: writes per minute at steady state", r["steady_writes_per_min"], "writes/min",
                 "0", f"{QUIET_S:.0f} s quiet window after Ready"),
            _row(f"{size} nodes: operator RSS", r["rss_mb"], "MiB", "<= 150 MB" if big else "",
                 "psutil, after the rollout"),
            _row(f"{size} nodes: operator CPU time", r["cpu_s"], "s", "",
                 "user+system, start to end; the rest of the wall time is the simulated cluster"),
        ]  # fmt: skip
    return rows


def plots(out_dir: Path) -> list[Path]:
    """Time to all-ready against cluster size (from the last run(), measured now if there is none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    for size in SIZES:
        if size not in _RESULTS:
            _RESULTS[size] = measure(size)
    sizes = sorted(_RESULTS)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / "operator-rollout-time.png"
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(sizes, [_RESULTS[s]["seconds"] for s in sizes], marker="o", label="create -> all nodes ready")
    ax.axhline(30, color="grey", linestyle="--", label="target at 1,000 nodes")
    ax.set_xlabel("simulated nodes (stub pods)")
    ax.set_ylabel("seconds")
    ax.set_title("gpuop operator rollout time vs cluster size")
    ax.legend()
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    plt.close(fig)
    return [target]


if __name__ == "__main__":
    for row in run():
        print(f"{row['name']:<60} {row['value']:>10.3g} {row['unit']}")
    print(plots(ROOT / "docs" / "img"))
