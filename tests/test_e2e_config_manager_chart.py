"""End to end as a new user: `helm install` of the umbrella chart with one AMD DeviceConfig that
turns the config manager on, then a shipped default profile applied to a node by name.

docs/config-manager.md says the chart ships partition profiles (AMD's device config manager names,
NVIDIA's MIG manager names). The user writes no profile: labelling the node
`gpuop.dev/gpu-config-profile=cpx-nps1` must repartition its MI300X GPUs. The real helm installs
into a process-mode simulated cluster (operator, device plugin, labeller and config manager are
real processes on the simulated MI300X SPX node; the exporter and test runner are off, nothing here
needs them).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_common.nodemeta import AMD_PRESENT_LABEL
from gpuop_sim import helm, hostfakes
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import NODES

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
UMBRELLA = ROOT / "charts" / "gpu-operator"
NAMESPACE = "gpu-operator"
RELEASE = "gpuop"  # helm.install's default
STATE = "gpuop.dev/gpu-config-state"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimCluster]:
    # One AMD DeviceConfig that turns the config manager on and writes no profile of its own.
    selector = {"matchLabels": {AMD_PRESENT_LABEL: "true"}}
    spec = {"vendor": "amd", "selector": selector, "configManager": {"enable": True}}
    values = {
        "deviceConfigs": [{"name": "amd", "spec": {**spec, "metricsExporter": {"enable": False}}}],
        # What `chroot /host` reaches on a real node: the simulated host (docs/simulated-cluster.md).
        "config-manager": {"intervalSeconds": 1, "hostExec": hostfakes.host_exec_for(Path("{host_root}"))},
    }
    values_file = tmp_path_factory.mktemp("values") / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    with SimCluster(profiles=["amd-mi300x-spx"]) as sim:
        helm.install(sim.kubeconfig, UMBRELLA, namespace=NAMESPACE, values_files=[values_file], wait=True)
        yield sim


def _node(cluster: SimCluster) -> dict[str, Any]:
    return dict(cluster.api().get(NODES, cluster.nodes[0].name))


def _allocatable(node: dict[str, Any]) -> int:
    return int(((node.get("status") or {}).get("allocatable") or {}).get("amd.com/gpu", "0"))


def test_a_shipped_profile_applies_by_name_after_a_plain_install(cluster: SimCluster) -> None:
    api = cluster.api()
    name = cluster.nodes[0].name
    cluster.wait_for(
        lambda: _node(cluster)["metadata"]["labels"].get("gpuop.dev/deploy.config-manager") == "true",
        timeout=240,
        what="the operator deploys the config manager",
    )
    cluster.wait_for_daemonset_ready(f"{RELEASE}-config-manager", NAMESPACE, timeout=180)
    cluster.wait_for(lambda: _allocatable(_node(cluster)) == 8, timeout=120, what="8 whole GPUs")
    api.patch(NODES, name, {"metadata": {"labels": {"gpuop.dev/gpu-config-profile": "cpx-nps1"}}})
    try:
        cluster.wait_for(
            lambda: _node(cluster)["metadata"]["labels"].get(STATE) in ("success", "failed"),
            timeout=300,
            what="the config manager's verdict",
        )
    except Exception:
        print(cluster.pod_logs_report(NAMESPACE))
        raise
    node = _node(cluster)
    reason = (node["metadata"].get("annotations") or {}).get("gpuop.dev/gpu-config-failure-reason", "")
    assert node["metadata"]["labels"][STATE] == "success", reason
    assert node["metadata"]["labels"]["dcm.amd.com/gpu-config-profile-state"] == "success"
    # CPX on each of the 8 GPUs: 8 partitions each in allocatable, and the labeller's mode label.
    cluster.wait_for(lambda: _allocatable(_node(cluster)) == 64, timeout=180, what="64 CPX partitions")
    cluster.wait_for(
        lambda: (
            _node(cluster)["metadata"]["labels"].get("amd.com/gpu.compute-memory-partition") == "cpx_nps1"
        ),
        timeout=180,
        what="the labeller's partition label",
    )
    sets = [c for c in hostfakes.recorded(cluster.nodes[0].root) if c[:2] == ["amd-smi", "set"]]
    assert sorted(c[4:] for c in sets) == [["--compute-partition", "CPX"]] * 8
