"""The rendered chart applied to the simulated cluster (`pods=process`): each node's exporter serves
its own GPUs on the node's address, with the pods the node's kubelet reports (what `make demo` shows)."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from gpuop_kubectl.table import metrics_urls
from gpuop_sim import helm
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, DAEMONSETS, NAMESPACES, PODS, Resource

CHART = Path(__file__).resolve().parents[3] / "charts" / "metrics-exporter"
SERVICEACCOUNTS = Resource("v1", "serviceaccounts", "ServiceAccount")
SERVICES = Resource("v1", "services", "Service")
KINDS = {
    "ConfigMap": CONFIGMAPS,
    "DaemonSet": DAEMONSETS,
    "ServiceAccount": SERVICEACCOUNTS,
    "Service": SERVICES,
}
pytestmark = pytest.mark.slow


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=3) as response:
            return response.read().decode() if response.status == 200 else ""
    except OSError:
        return ""


def wait_for_text(url: str, needle: str, timeout: float = 90.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = fetch(url)
        if needle in text:
            return text
        time.sleep(0.2)
    raise AssertionError(f"{needle!r} not served at {url} within {timeout}s; last body: {text[:300]!r}")


def test_chart_in_the_simulated_cluster_serves_each_nodes_gpus() -> None:
    helm.dependency_build(CHART)
    docs: list[dict[str, Any]] = helm.template(
        CHART, release="gpuop", namespace="gpuop", values=["config.collectionIntervalSeconds=1"]
    )
    with SimCluster(profiles=["amd-mi210x8", "nvidia-h100x8"], pods="process") as cluster:
        api = cluster.api()
        api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpuop"}})
        for doc in docs:
            api.create(KINDS[doc["kind"]], doc, "gpuop")
        cluster.wait_for_daemonset_ready("gpuop-metrics-exporter", "gpuop", timeout=90)
        pods = {p["spec"]["nodeName"]: p for p in api.list(PODS, "gpuop")[0]}
        assert set(pods) == {"amd-0", "nvidia-0"}
        amd_url = metrics_urls(pods["amd-0"])[0]
        nvidia_url = metrics_urls(pods["nvidia-0"])[0]
        assert amd_url == f"http://{cluster.node('amd-0').address}:5000/metrics"
        amd = wait_for_text(amd_url, "gpu_health{")
        assert 'hostname="amd-0"' in amd and "\nDCGM_FI_DEV_GPU_TEMP{" not in amd
        nvidia = wait_for_text(nvidia_url, "DCGM_FI_DEV_GPU_TEMP{")
        assert 'hostname="nvidia-0"' in nvidia and "\ngpu_health{" not in nvidia
        # A workload on the AMD node holds GPU 3: its series now name that pod.
        assert cluster.kubelets is not None
        kubelet = cluster.kubelets.device_sources["amd-0"]
        bdf = sorted(p.name for p in (cluster.node("amd-0").root / "sys/bus/pci/devices").iterdir())[3]
        kubelet.assign("trainer", "ml", "main", "amd.com/gpu", [bdf])  # type: ignore[attr-defined]
        text = wait_for_text(amd_url, 'pod="trainer"')
        held = [
            line for line in text.splitlines() if line.startswith("gpu_health{") and 'pod="trainer"' in line
        ]
        assert len(held) == 1 and f'pci_bus_id="{bdf}"' in held[0] and 'namespace="ml"' in held[0]
