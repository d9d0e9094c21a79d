"""The rendered chart applied to the simulated cluster: each node's plugin registers with that node's
kubelet emulator and the Node's status.allocatable shows its GPUs (what `make demo` shows)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpuop_sim import helm
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, DAEMONSETS, NAMESPACES, NODES, Resource

CHART = Path(__file__).resolve().parents[3] / "charts" / "device-plugin"
SERVICEACCOUNTS = Resource("v1", "serviceaccounts", "ServiceAccount")
KINDS = {"ConfigMap": CONFIGMAPS, "DaemonSet": DAEMONSETS, "ServiceAccount": SERVICEACCOUNTS}
pytestmark = pytest.mark.slow


def test_chart_in_the_simulated_cluster_fills_node_allocatable() -> None:
    helm.dependency_build(CHART)
    docs: list[dict[str, Any]] = helm.template(
        CHART, release="gpuop", namespace="gpuop", values=["config.resourceNamingStrategy=mixed"]
    )
    with SimCluster(
        profiles=["amd-mi210x8", "amd-mi300x-cpx", "nvidia-h100x8-mig"], pods="process"
    ) as cluster:
        api = cluster.api()
        api.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gpuop"}})
        for doc in docs:
            api.create(KINDS[doc["kind"]], doc, "gpuop")
        expected = {
            "amd-0": ("amd.com/gpu", "8"),
            "amd-1": ("amd.com/cpx_nps4", "63"),
            "nvidia-0": ("nvidia.com/gpu", "8"),  # migStrategy none: MIG GPUs as whole GPUs
        }
        for node, (resource, count) in expected.items():
            cluster.wait_for_object(
                NODES,
                node,
                predicate=lambda n, r=resource, c=count: n["status"].get("allocatable", {}).get(r) == c,  # type: ignore[misc]
                timeout=90,
            )
