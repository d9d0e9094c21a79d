"""End to end in container mode: the umbrella chart (real helm) on one AMD node whose pods run as
real containers (runc) from the images `make images` built.

The node starts without a driver: the operator's driver Job runs its playbook in the operator image,
reaching the node's root through its `/host` mount (the host's tools being the simulator's fakes
installed on that root, `hostfakes.CONTAINER_HOST_EXEC`). Then the device plugin, labeller and
exporter run from their own images: the node reaches allocatable 8 `amd.com/gpu`, gets the
labeller's labels, and the exporter serves GPU metrics. One cluster, tests in file order.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_common.nodemeta import DRIVER_VERSION_LABEL
from gpuop_sim import helm, hostfakes
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import JOBS, NODES, PODS

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
UMBRELLA = ROOT / "charts" / "gpu-operator"
NAMESPACE = "gpu-operator"
RELEASE = "gpuop"
NODE = "amd-0"
AGENTS = ("device-plugin", "node-labeller", "metrics-exporter")
IMAGES = ("operator", *AGENTS)


def values() -> dict[str, Any]:
    """Only what this node needs, from the images built here; the driver installed by a Job."""
    return {
        "operator": {"driverJobs": {"hostExec": hostfakes.CONTAINER_HOST_EXEC}},
        "dra-driver": {"enabled": False},
        "test-runner": {"enabled": False},
        "config-manager": {"enabled": False},
        "deviceConfigs": [
            {
                "name": "amd",
                "spec": {
                    "vendor": "amd",
                    "selector": {"matchLabels": {"feature.node.kubernetes.io/pci-1002.present": "true"}},
                    "driver": {"enable": True},
                },
            }
        ],
    }


@pytest.fixture(scope="module")
def cluster(
    require_image: Callable[[str], str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SimCluster]:
    for service in IMAGES:
        require_image(service)
    helm.dependency_build(UMBRELLA)
    values_file = tmp_path_factory.mktemp("values") / "values.yaml"
    values_file.write_text(yaml.safe_dump(values()))
    started = time.monotonic()
    with SimCluster(profiles=["amd-mi210x8"], pods="container", driver_loaded=False) as sim:
        result = helm.run_helm(
            [
                "install", RELEASE, str(UMBRELLA), "-n", NAMESPACE, "--create-namespace",
                "-f", str(values_file), "--wait", "--timeout", "5m", "--kubeconfig", str(sim.kubeconfig),
            ]
        )  # fmt: skip
        assert result.returncode == 0, f"helm install: {result.stderr}"
        yield sim
        print(f"\ncontainer-mode e2e: {time.monotonic() - started:.0f}s from cluster start")


def pods_of(cluster: SimCluster, name: str) -> list[dict[str, Any]]:
    return cluster.api().list(PODS, NAMESPACE, labelSelector=f"app.kubernetes.io/name={name}")[0]


def ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def wait(cluster: SimCluster, check: Callable[[], bool], what: str, timeout: float = 300) -> None:
    try:
        cluster.wait_for(check, timeout=timeout, what=what)
    except Exception as error:
        raise AssertionError(f"{error}\n{cluster.pod_logs_report(NAMESPACE)}") from error


def test_the_driver_job_runs_its_playbook_in_a_container_against_the_host_root(cluster: SimCluster) -> None:
    api = cluster.api()
    wait(
        cluster,
        lambda: bool(api.get(NODES, NODE)["metadata"]["labels"].get(DRIVER_VERSION_LABEL)),
        "the driver installed by the operator's Job",
    )
    jobs = [j for j in api.list(JOBS, NAMESPACE)[0] if j["metadata"]["name"].startswith(f"{RELEASE}-driver")]
    assert jobs, [j["metadata"]["name"] for j in api.list(JOBS, NAMESPACE)[0]]
    job_pods = api.list(PODS, NAMESPACE, labelSelector=f"job-name={jobs[0]['metadata']['name']}")[0]
    assert job_pods, "the driver Job's pod is gone"
    status = job_pods[0]["status"]["containerStatuses"][0]
    assert status["containerID"].startswith("runc://"), status
    assert status["state"]["terminated"]["exitCode"] == 0, status
    # The playbook's host commands landed on the node's root, which the container saw as /host.
    commands = hostfakes.recorded(cluster.node(NODE).root)
    assert ["modprobe", "amdgpu"] in commands, commands
    assert (cluster.node(NODE).root / "dev/kfd").exists()


def test_agents_run_from_their_images_and_the_node_offers_eight_gpus(cluster: SimCluster) -> None:
    api = cluster.api()
    uids: dict[str, int] = {}
    wait(
        cluster,
        lambda: api.get(NODES, NODE)["status"].get("allocatable", {}).get("amd.com/gpu") == "8",
        "allocatable amd.com/gpu 8",
    )
    for agent in AGENTS:
        wait(
            cluster,
            lambda agent=agent: any(
                (p.get("status") or {}).get("phase") == "Running" for p in pods_of(cluster, agent)
            ),
            f"a running {agent} pod",
        )
        pod = next(p for p in pods_of(cluster, agent) if p["status"].get("phase") == "Running")
        status = pod["status"]["containerStatuses"][0]
        assert status["containerID"].startswith("runc://"), (agent, status)
        assert status["image"] == f"gpuop/gpuop-{agent}:{(ROOT / 'VERSION').read_text().strip()}"
    # The labeller's chart sets no user: the image's USER. The device plugin's sets runAsUser 0.
    for agent, uid in (("node-labeller", 65532), ("device-plugin", 0)):
        wait(cluster, lambda agent=agent: record_uid(cluster, agent, uids), f"the {agent} process's uid")
        assert uids[agent] == uid, uids


def record_uid(cluster: SimCluster, agent: str, uids: dict[str, int]) -> bool:
    """The real uid of the agent's running container process, as the kernel has it (False while
    no container of a Running pod is there: a DaemonSet rollout may be replacing it)."""
    for pod in pods_of(cluster, agent):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            runc_id = str(status.get("containerID", "")).removeprefix("runc://")
            state = subprocess.run(
                ["runc", "--root", str(cluster.state_dir / "runc"), "state", runc_id],
                capture_output=True,
                text=True,
                check=False,
            )
            if state.returncode == 0 and json.loads(state.stdout)["status"] == "running":
                status_file = Path(f"/proc/{json.loads(state.stdout)['pid']}/status").read_text()
                uid_line = next(line for line in status_file.splitlines() if line.startswith("Uid:"))
                uids[agent] = int(uid_line.split()[1])
                return True
    return False


def test_the_labeller_labels_the_node_and_the_exporter_serves_gpu_metrics(cluster: SimCluster) -> None:
    api = cluster.api()
    wait(
        cluster,
        lambda: any(k.startswith("amd.com/gpu.") for k in api.get(NODES, NODE)["metadata"]["labels"]),
        "the labeller's amd.com/gpu.* labels",
    )
    wait(
        cluster,
        lambda: any(ready(p) for p in pods_of(cluster, "metrics-exporter")),
        "a Ready metrics exporter (its readiness probe answered)",
    )
    pod = next(p for p in pods_of(cluster, "metrics-exporter") if ready(p))
    port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
    url = f"http://{pod['status']['podIP']}:{port}/metrics"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body = response.read().decode()
    except OSError as error:
        raise AssertionError(f"{url}: {error}\n{cluster.pod_logs_report(NAMESPACE)}") from error
    assert response.status == 200
    assert "gpu_edge_temperature" in body or "gpu_health" in body, body[:2000]
    # kubectl logs reads the same CRI log file the container wrote to.
    assert cluster.pod_log(NAMESPACE, pod["metadata"]["name"], pod["spec"]["containers"][0]["name"])
