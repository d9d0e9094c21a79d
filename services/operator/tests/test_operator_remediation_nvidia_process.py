"""Remediation of an NVIDIA node in process mode, with the real agents holding NVML open.

The node labeller and the metrics exporter run as processes with the fake NVML initialised, so the
fake `nvidia-smi -r` refuses the reset while either runs (`gpuop_sim.gpuholders`), as the driver
does on hardware. An XID the labeller reports starts a run; the operator pauses the operands, the
reset Job starts only once their pods are gone, the real `gpu-reset` playbook resets the GPU, the
operands come back, the labeller sees the GPU healthy and the node is given back, with no reboot.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from gpuop_operator.driverjob import JobSettings
from gpuop_operator.remediation import STATE_LABEL
from gpuop_sim import gpuholders, hostfakes
from gpuop_sim.cluster import SimCluster
from gpuop_sim.nodes import inject_xid
from gpuop_sim.nodes.nvml_state import STATE_RELPATH, load_state
from gpuop_sim.workloads.kubeapi import DAEMONSETS, NODES, Resource
from kubernetes import client, config, watch

pytestmark = pytest.mark.slow
NAMESPACE = "gpu-operator"
OPERANDS = ("node-labeller", "metrics-exporter")
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
JOBS_VIA_FAKES = JobSettings(
    namespace=NAMESPACE,
    release="gpuop",
    image="gpuop/gpuop-operator:0.1.0",
    host_exec=f"{sys.executable} -m gpuop_sim.hostfakes --root {{host_root}}",
    deadline_seconds=600,
)
SPEC = {
    "devicePlugin": {"enable": False},
    "nodeLabeller": {"enable": True},
    "metricsExporter": {"enable": True},
    "remediation": {"enable": True, "conditionHoldSeconds": 0, "resetClearSeconds": 60},
}


@pytest.fixture(scope="module")
def cluster(kit: Any) -> Iterator[SimCluster]:
    with SimCluster(profiles=["nvidia-h100x8"], pods="process") as sim:
        kit.install_operands(sim.api(), OPERANDS)
        # The labeller's resync from its flag (no config file mounted here): 2 s, not 60 s.
        patch = [{"op": "add", "path": "/spec/template/spec/containers/0/args", "value": ["--interval=2"]}]
        sim.api().patch(
            DAEMONSETS, "gpuop-node-labeller", patch, NAMESPACE, content_type="application/json-patch+json"
        )
        yield sim


class PodLog:
    """Every pod event in the namespace, in the API server's order: (type, pod name, node)."""

    def __init__(self, cluster: SimCluster) -> None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        self.api = client.ApiClient(configuration)
        self.events: list[tuple[str, str, str]] = []
        self.watch = watch.Watch()  # type: ignore[no-untyped-call]
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            stream = self.watch.stream(
                client.CoreV1Api(self.api).list_namespaced_pod, NAMESPACE, timeout_seconds=600
            )
            for event in stream:
                pod = event["object"]
                self.events.append((event["type"], pod.metadata.name, pod.spec.node_name or ""))
        except (urllib3.exceptions.HTTPError, OSError):
            pass  # stop() closes the connection under the stream

    def stop(self) -> None:
        self.watch.stop()
        self.api.close()


def gpu_healthy(cluster: SimCluster, node: str) -> str | None:
    conditions = cluster.api().get(NODES, node)["status"].get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "GPUHealthy"), None)


def operand_pods(cluster: SimCluster, node: str) -> set[str]:
    pods, _ = cluster.api().list(Resource("v1", "pods", "Pod"), NAMESPACE)
    return {
        p["metadata"]["name"]
        for p in pods
        if p["spec"].get("nodeName") == node
        and p["metadata"]["labels"].get("app.kubernetes.io/name") in OPERANDS
        and p["status"].get("phase") == "Running"
    }


def test_an_xid_is_reset_with_the_operands_paused_and_the_node_given_back_without_a_reboot(
    cluster: SimCluster, kit: Any
) -> None:
    node = cluster.nodes[0]
    api = cluster.api()
    with kit.operator_running(cluster, jobs=JOBS_VIA_FAKES):
        api.create(DEVICECONFIGS, kit.device_config(spec=SPEC), NAMESPACE)
        cluster.wait_for(
            lambda: gpu_healthy(cluster, node.name) == "True", timeout=120, what="GPUHealthy=True"
        )
        running = cluster.wait_for(
            lambda: (found := operand_pods(cluster, node.name)) and len(found) == len(OPERANDS) and found,
            timeout=120,
            what="the operands running",
        )
        log = PodLog(cluster)
        try:
            gpu = gpuholders.nvml_pci(load_state(node.root / STATE_RELPATH).gpus[3].bus_id)
            inject_xid(node.root, gpu, 79)
            cluster.wait_for(
                lambda: api.get(NODES, node.name)["metadata"]["labels"].get(STATE_LABEL) == "recovered",
                timeout=240,
                what=f"{node.name} recovered",
            )
        finally:
            log.stop()
    final = api.get(NODES, node.name)
    assert gpu_healthy(cluster, node.name) == "True"
    assert not final["spec"].get("unschedulable")
    assert not [t for t in final["spec"].get("taints") or [] if t["key"] == "gpuop.dev/gpu-unhealthy"]
    labels = final["metadata"]["labels"]
    assert all(labels[f"gpuop.dev/deploy.{s}"] == "true" for s in OPERANDS)  # resumed
    commands = hostfakes.recorded(node.root)
    assert [c for c in commands if c[:2] == ["nvidia-smi", "-r"]] == [["nvidia-smi", "-r", "-i", gpu]]
    assert ["reboot"] not in commands  # the first reset was not refused: no process held the GPU
    # Every operand pod that ran was deleted before the reset Job's pod was created.
    order = [(kind, name) for kind, name, _ in log.events]
    reset_pod = next(i for i, (kind, name) in enumerate(order) if kind == "ADDED" and "reset" in name)
    for name in running:
        assert ("DELETED", name) in order[:reset_pod], (name, order)
