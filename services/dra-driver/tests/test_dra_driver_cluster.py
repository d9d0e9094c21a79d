"""The chart applied to a simulated cluster with real pod processes (what `make demo --dra` shows):
each GPU node's DaemonSet pod registers with that node's kubelet and publishes its ResourceSlices,
and a claim allocated there is prepared through the node's kubelet into a CDI spec in its root."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_common.kubejson import RESOURCECLAIMS, RESOURCESLICES
from gpuop_sim import helm
from gpuop_sim.binaries import find_binary
from gpuop_sim.cluster import SimCluster
from gpuop_sim.kubelet import DraClaim
from gpuop_sim.shortpaths import short_tmp_dir
from gpuop_sim.workloads.kubeapi import NAMESPACES

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "dra-driver"
NAMESPACE = "gpu-operator"
DRIVER = "gpu.gpuop.dev"

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster() -> Iterator[SimCluster]:
    # A short state dir: `<node root>/var/lib/kubelet/plugins_registry/gpu.gpuop.dev-reg.sock` must fit
    # into a unix socket address (107 bytes), as it does under a real node's /.
    state = short_tmp_dir("dc-")
    try:
        with SimCluster(state, profiles=["amd-mi300x-cpx", "nvidia-h100x8-mig", "cpu-only"]) as sim:
            yield sim
    finally:
        shutil.rmtree(state, ignore_errors=True)


def apply_chart(cluster: SimCluster) -> None:
    helm.dependency_build(CHART)
    docs = helm.template(CHART, release="gpuop", namespace=NAMESPACE)
    cluster.api().create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    )
    kubectl = [str(find_binary("kubectl")), "--kubeconfig", str(cluster.kubeconfig)]
    applied = subprocess.run(
        [*kubectl, "apply", "--validate=false", "-f", "-"],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
        check=False,
    )
    assert applied.returncode == 0, applied.stderr


def devices_on(cluster: SimCluster, node: str) -> list[str]:
    items, _ = cluster.api().list(RESOURCESLICES, fieldSelector=f"spec.nodeName={node},spec.driver={DRIVER}")
    return sorted(d["name"] for s in items for d in s["spec"]["devices"])


def test_every_gpu_node_publishes_its_devices_and_prepares_a_claim(cluster: SimCluster) -> None:
    apply_chart(cluster)
    amd, nvidia, cpu = (n.name for n in cluster.nodes)
    cluster.wait_for(lambda: devices_on(cluster, amd), timeout=120, what="AMD slices")
    assert len(devices_on(cluster, amd)) == cluster.node(amd).partitions == 63
    mig_count = cluster.node(nvidia).partitions
    cluster.wait_for(
        lambda: len([d for d in devices_on(cluster, nvidia) if "-mig-" in d]) == mig_count,
        timeout=120,
        what="NVIDIA slices",
    )
    assert devices_on(cluster, cpu) == []  # the standalone DaemonSet selects GPU nodes only
    cluster.wait_for_daemonset_ready("gpuop-dra-driver", NAMESPACE, timeout=120)

    api = cluster.api()
    device = devices_on(cluster, amd)[5]
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "one-partition"},
        "spec": {
            "devices": {"requests": [{"name": "p", "exactly": {"deviceClassName": "cpx.amd." + DRIVER}}]}
        },
    }
    claim = api.create(RESOURCECLAIMS, body, "default")
    result = {"request": "p", "driver": DRIVER, "pool": amd, "device": device}
    api.replace_status(RESOURCECLAIMS, claim, {"allocation": {"devices": {"results": [result]}}})
    kubelet = cluster.kubelet_emulator(amd)
    ref = DraClaim("default", claim["metadata"]["uid"], "one-partition")
    answer = kubelet.prepare(DRIVER, [ref])[ref.uid]
    assert answer.error == "" and [d.device_name for d in answer.devices] == [device]
    spec_file = cluster.node(amd).root / f"var/run/cdi/gpuop-dra-{ref.uid}.json"
    spec = json.loads(spec_file.read_text())
    assert spec["kind"] == "k8s.gpu.gpuop.dev/claim"
    assert kubelet.unprepare(DRIVER, [ref]) == {ref.uid: ""}
    assert not spec_file.exists()
