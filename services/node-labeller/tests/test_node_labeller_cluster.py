"""The chart, applied to a simulated cluster with real pod processes: every GPU node gets its labels.

This is what `make demo` shows: the rendered DaemonSet runs the console script on each node through
the simulated kubelet, reading that node's fixture root and writing labels through the API server.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from gpuop_sim import helm
from gpuop_sim.binaries import find_binary
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, NAMESPACES, NODES

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "node-labeller"
NAMESPACE = "gpu-operator"

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[SimCluster]:
    # Default state dir (short /tmp path, removed on stop); no kubelet emulators: nothing here uses them.
    profiles = ["amd-mi300x-cpx", "nvidia-h100x8", "cpu-only"]
    with SimCluster(profiles=profiles, device_plugins=False) as sim:
        yield sim


def apply_chart(cluster: SimCluster, values: list[str]) -> None:
    helm.dependency_build(CHART)
    docs = helm.template(CHART, release="gpuop", namespace=NAMESPACE, values=values)
    kubectl = [str(find_binary("kubectl")), "--kubeconfig", str(cluster.kubeconfig)]
    # `kubectl create` speaks protobuf, which the simulator does not: create the namespace over JSON.
    cluster.api().create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    applied = subprocess.run(
        [*kubectl, "apply", "--validate=false", "-f", "-"],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr


def labels(cluster: SimCluster, node: str) -> dict[str, str]:
    return dict((cluster.api().get(NODES, node).get("metadata") or {}).get("labels") or {})


def test_every_gpu_node_shows_its_labels(cluster: SimCluster) -> None:
    apply_chart(cluster, ["udev=false"])
    amd, nvidia = cluster.nodes[0].name, cluster.nodes[1].name
    cluster.wait_for(
        lambda: labels(cluster, amd).get("gpuop.dev/gpu.present") == "true", timeout=90, what="AMD labels"
    )
    cluster.wait_for(
        lambda: labels(cluster, nvidia).get("gpuop.dev/gpu.present") == "true",
        timeout=90,
        what="NVIDIA labels",
    )
    amd_labels, nvidia_labels = labels(cluster, amd), labels(cluster, nvidia)
    assert amd_labels["amd.com/gpu.compute-memory-partition"] == "cpx_nps4"
    assert amd_labels["beta.amd.com/gpu.cu-count.38"] == "63"
    assert amd_labels["gpuop.dev/gpu.vendor"] == "amd"
    assert nvidia_labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert nvidia_labels["nvidia.com/gpu.count"] == "8"
    assert nvidia_labels["gpuop.dev/gpu.vendor"] == "nvidia"
    # The standalone DaemonSet selects GPU nodes only: the CPU node is never labelled.
    assert not [k for k in labels(cluster, cluster.nodes[2].name) if k.startswith("gpuop.dev/gpu.")]
    cluster.wait_for_daemonset_ready("gpuop-node-labeller", NAMESPACE, timeout=60)

    # A ConfigMap edit reaches the running pods through the mounted file: no restart, labels follow.
    config = "labelSets: [neutral]\nintervalSeconds: 60\n"
    cluster.api().patch(
        CONFIGMAPS, "gpuop-node-labeller-config", {"data": {"config.yaml": config}}, NAMESPACE
    )
    cluster.wait_for(
        lambda: not [k for k in labels(cluster, amd) if k.startswith(("amd.com/", "beta.amd.com/"))],
        timeout=60,
        what="AMD labels removed after the config change",
    )
    cluster.wait_for(
        lambda: not [k for k in labels(cluster, nvidia) if k.startswith("nvidia.com/")],
        timeout=60,
        what="NVIDIA labels removed after the config change",
    )
    assert labels(cluster, amd)["gpuop.dev/gpu.partition.compute"] == "cpx"
    assert labels(cluster, nvidia)["gpuop.dev/gpu.model"] == "NVIDIA-H100-80GB-HBM3"
