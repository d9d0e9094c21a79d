"""End to end: the umbrella chart rendered by the real helm, applied by the real kubectl to a simulated
cluster whose pods are real processes (operator and every operand), rolls out to Ready.

What a user would check after `helm install`: each GPU node carries the deploy labels in order and
ends `ready`, the operands' labels and allocatable GPUs appear, the operand ConfigMaps hold the
DeviceConfig settings, the DeviceConfigs report Ready, and each node's exporter serves /metrics.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_sim import helm
from gpuop_sim.binaries import find_binary
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, JOBS, NODES, PODS, Resource

ROOT = Path(__file__).resolve().parents[1]
UMBRELLA = ROOT / "charts" / "gpu-operator"
NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
CRDS = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False)
SERVICES = ("device-plugin", "node-labeller", "metrics-exporter", "test-runner")
GPU_RESOURCE = {"amd": "amd.com/gpu", "nvidia": "nvidia.com/gpu"}
# A registry mirror's copy of NVIDIA's DCGM image, which the simulated kubelets run as the fake
# tools image; the shipped default (nvcr.io/...) is not pullable here, as on an air-gapped node.
DCGM_MIRROR = "mirror.example:5000/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"


def kubectl(cluster: SimCluster, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(find_binary("kubectl")), "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    tools = {DCGM_MIRROR: [sys.executable, "-m", "gpuop_sim.toolsimage", "nvidia"]}
    with SimCluster(amd_nodes=2, nvidia_nodes=1, cpu_nodes=1, image_commands=tools) as sim:
        # `helm install` as kubectl can do it: namespace, CRDs (Established), every non-hook object.
        helm.kubectl_install(sim.kubeconfig, UMBRELLA, namespace=NAMESPACE)
        yield sim


def condition(dc: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (dc.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return {}


def all_ready(cluster: SimCluster) -> bool:
    dcs, _ = cluster.api().list(DEVICECONFIGS, NAMESPACE)
    return len(dcs) == 2 and all(condition(dc, "Ready").get("status") == "True" for dc in dcs)


@pytest.mark.slow
def test_umbrella_chart_rolls_every_gpu_node_out_to_ready(cluster: SimCluster) -> None:
    try:
        cluster.wait_for(lambda: all_ready(cluster), timeout=240, what="both DeviceConfigs Ready")
    except Exception:
        print(cluster.pod_logs_report(NAMESPACE, tail=1500))
        raise
    api = cluster.api()
    for node in cluster.nodes:
        obj = api.get(NODES, node.name)
        labels, annotations = obj["metadata"]["labels"], obj["metadata"].get("annotations") or {}
        deploy = {k: v for k, v in labels.items() if k.startswith("gpuop.dev/deploy.")}
        if node.vendor == "cpu":
            assert deploy == {} and "gpuop.dev/stage" not in annotations, node.name
            continue
        assert deploy == {f"gpuop.dev/deploy.{s}": "true" for s in SERVICES}, node.name
        assert annotations["gpuop.dev/stage"] == "ready"
        assert annotations["gpuop.dev/deviceconfig"] == f"{NAMESPACE}/{node.vendor}"
        allocatable = obj["status"]["allocatable"]
        assert int(allocatable.get(GPU_RESOURCE[node.vendor], "0")) > 0, (node.name, allocatable)
        # The node labeller ran: vendor-compatible labels are on the node.
        assert any(k.startswith(("amd.com/", "nvidia.com/")) for k in labels), node.name

    for name in ("amd", "nvidia"):
        dc = api.get(DEVICECONFIGS, name, NAMESPACE)
        status = dc["status"]
        gpu_nodes = [n for n in cluster.nodes if n.vendor == name]
        assert status["selectedNodes"] == status["readyNodes"] == len(gpu_nodes)
        assert status["operands"]["devicePlugin"] == {"desired": len(gpu_nodes), "ready": len(gpu_nodes)}
        assert condition(dc, "Degraded")["status"] == "False"
        assert status["observedGeneration"] == dc["metadata"]["generation"]

    held = {n.name: f"{NAMESPACE}.{n.vendor}.yaml" for n in cluster.nodes if n.vendor != "cpu"}
    for service in SERVICES:
        data = api.get(CONFIGMAPS, f"gpuop-{service}-config", NAMESPACE)["data"]
        assert {f"{NAMESPACE}.amd.yaml", f"{NAMESPACE}.nvidia.yaml", "config.yaml"} <= set(data)
        yaml.safe_load(data["config.yaml"])
        assert yaml.safe_load(data["nodes.yaml"]) == held  # each agent finds its DeviceConfig's key

    exporters, _ = api.list(PODS, NAMESPACE, labelSelector="app.kubernetes.io/name=metrics-exporter")
    assert len(exporters) == 3
    for pod in exporters:
        port = pod["spec"]["containers"][0]["ports"][0]["containerPort"]
        url = f"http://{pod['status']['podIP']}:{port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            assert response.status == 200
            assert b"# TYPE" in response.read()


@pytest.mark.slow
def test_kubectl_shows_printer_columns_and_the_operator_metrics(cluster: SimCluster) -> None:
    cluster.wait_for(lambda: all_ready(cluster), timeout=240, what="both DeviceConfigs Ready")
    table = kubectl(cluster, "-n", NAMESPACE, "get", "gpudc")
    assert "READY-NODES" in table and "amd" in table and "nvidia" in table
    (operator,) = cluster.api().list(PODS, NAMESPACE, labelSelector="app.kubernetes.io/name=operator")[0]
    url = f"http://{operator['status']['podIP']}:8080/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    assert 'gpuop_operator_nodes{deviceconfig="gpu-operator/amd",stage="ready"} 2.0' in text
    assert "gpuop_operator_leader 1.0" in text


@pytest.mark.slow
def test_exporters_started_only_after_stage_two_was_ready_on_their_node(cluster: SimCluster) -> None:
    cluster.wait_for(lambda: all_ready(cluster), timeout=240, what="both DeviceConfigs Ready")
    pods, _ = cluster.api().list(PODS, NAMESPACE)
    ready_at: dict[tuple[str, str], str] = {}
    created_at: dict[tuple[str, str], str] = {}
    for pod in pods:
        service = pod["metadata"]["labels"].get("app.kubernetes.io/name", "")
        key = (pod["spec"].get("nodeName", ""), service)
        created_at[key] = pod["metadata"]["creationTimestamp"]
        for cond in pod["status"].get("conditions") or []:
            if cond["type"] == "Ready" and cond["status"] == "True":
                ready_at[key] = cond["lastTransitionTime"]
    for node in (n for n in cluster.nodes if n.vendor != "cpu"):
        exporter = created_at[(node.name, "metrics-exporter")]
        # RFC 3339 UTC timestamps of one format compare as strings.
        assert exporter >= ready_at[(node.name, "device-plugin")], node.name
        assert exporter >= ready_at[(node.name, "node-labeller")], node.name


def log_tail(cluster: SimCluster, pod: dict[str, Any], container: str) -> str:
    """The end of a container's log, so a failed assertion says why it restarted."""
    try:
        return cluster.pod_log(NAMESPACE, pod["metadata"]["name"], container)[-2000:]
    except FileNotFoundError as missing:
        return str(missing)


@pytest.mark.slow
def test_spec_change_reaches_the_configmaps_without_restarting_agents(cluster: SimCluster) -> None:
    cluster.wait_for(lambda: all_ready(cluster), timeout=240, what="both DeviceConfigs Ready")
    api = cluster.api()
    before = {p["metadata"]["uid"] for p in api.list(PODS, NAMESPACE)[0]}
    for name in ("amd", "nvidia"):
        api.patch(DEVICECONFIGS, name, {"spec": {"nodeLabeller": {"intervalSeconds": 30}}}, NAMESPACE)

    def projected() -> bool:
        data = api.get(CONFIGMAPS, "gpuop-node-labeller-config", NAMESPACE)["data"]
        return all(
            yaml.safe_load(data[key]).get("intervalSeconds") == 30
            for key in ("config.yaml", f"{NAMESPACE}.amd.yaml")
        )

    cluster.wait_for(projected, timeout=30, what="new nodeLabeller settings in the ConfigMap")
    cluster.wait_for(lambda: all_ready(cluster), timeout=60, what="still Ready")
    after = api.list(PODS, NAMESPACE)[0]
    assert {p["metadata"]["uid"] for p in after} == before
    restarted = {
        f"{p['metadata']['name']}/{cs['name']}": (cs.get("lastState"), log_tail(cluster, p, cs["name"]))
        for p in after
        for cs in p["status"].get("containerStatuses") or []
        if cs.get("restartCount", 0)
    }
    assert not restarted, restarted


@pytest.mark.slow
def test_operator_requests_a_self_check_and_each_node_answers(cluster: SimCluster) -> None:
    """The operator API of the test runner: request annotation in, result annotation out."""
    cluster.wait_for(lambda: all_ready(cluster), timeout=240, what="both DeviceConfigs Ready")
    api = cluster.api()
    config = yaml.safe_load(api.get(CONFIGMAPS, "gpuop-test-runner-config", NAMESPACE)["data"]["config.yaml"])
    assert (config["enable"], config["recipe"]) == (True, "gpuop-selfcheck")
    gpu_nodes = [n for n in cluster.nodes if n.vendor != "cpu"]
    for node in gpu_nodes:
        api.patch(
            NODES,
            node.name,
            {"metadata": {"annotations": {"gpuop.dev/test-request": f"gpuop-selfcheck:e2e-{node.name}"}}},
        )
    for node in gpu_nodes:
        obj = cluster.wait_for_object(
            NODES,
            node.name,
            None,
            lambda n: "gpuop.dev/test-result" in (n["metadata"].get("annotations") or {}),
            timeout=120,
        )
        annotations, labels = obj["metadata"]["annotations"], obj["metadata"]["labels"]
        answer = json.loads(annotations["gpuop.dev/test-result"])
        assert (answer["requestId"], answer["recipe"]) == (f"e2e-{node.name}", "gpuop-selfcheck")
        assert answer["result"] == "Passed", answer
        assert len(answer["gpus"]) == int(labels["gpuop.dev/gpu.count"]) > 0
        assert "gpuop.dev/test-request" not in annotations
        assert labels["gpuop.dev/gpu.test-result"] == "passed"
    cluster.wait_for_events(
        None,
        lambda events: (
            {n.name for n in gpu_nodes}
            <= {e["involvedObject"]["name"] for e in events if e["reason"] == "TestPassed"}
        ),
        what="TestPassed on every GPU node",
    )


def ask(cluster: SimCluster, node: str, request: str) -> dict[str, Any]:
    """Annotate the node with a test request; the test runner's answer to it."""
    cluster.api().patch(NODES, node, {"metadata": {"annotations": {"gpuop.dev/test-request": request}}})
    request_id = request.split(":", 1)[1]
    done = cluster.wait_for_object(
        NODES,
        node,
        None,
        lambda n: (
            json.loads((n["metadata"].get("annotations") or {}).get("gpuop.dev/test-result", "{}")).get(
                "requestId"
            )
            == request_id
        ),
        timeout=120,
    )
    answer: dict[str, Any] = json.loads(done["metadata"]["annotations"]["gpuop.dev/test-result"])
    return answer


@pytest.mark.slow
def test_a_vendor_recipe_runs_in_the_tools_image_the_deviceconfig_names(cluster: SimCluster) -> None:
    """The chart's test runner starts the tools pod (its Role, its namespace); the shipped default
    image cannot be pulled here, so the answer is ToolMissing naming the setting; a mirror named
    in the DeviceConfig runs `dcgmi diag` and judges every GPU."""
    cluster.wait_for(lambda: all_ready(cluster), timeout=240, what="both DeviceConfigs Ready")
    api = cluster.api()
    (node,) = (n.name for n in cluster.nodes if n.vendor == "nvidia")
    missing = ask(cluster, node, "dcgm-level-1:e2e-tools-default")
    assert missing["result"] == "ToolMissing", missing
    events = cluster.wait_for_events(
        None,
        lambda evs: any(e["reason"] == "ToolMissing" and e["involvedObject"]["name"] == node for e in evs),
        what=f"ToolMissing on {node}",
    )
    message = next(e["message"] for e in events if e["reason"] == "ToolMissing")
    assert "set testRunner.toolsImage.nvidia to an image with dcgmi" in message
    assert "ErrImagePull" in message

    mirror = {"spec": {"testRunner": {"toolsImage": {"nvidia": DCGM_MIRROR}}}}
    api.patch(DEVICECONFIGS, "nvidia", mirror, NAMESPACE)
    answers: list[dict[str, Any]] = []

    def from_the_mirror() -> bool:
        # The agent reloads its config file every few seconds: an answer from before still says
        # ToolMissing, so ask again until one comes from the mirror's image.
        answers.append(ask(cluster, node, f"dcgm-level-1:e2e-tools-mirror-{len(answers)}"))
        return answers[-1]["result"] != "ToolMissing"

    try:
        cluster.wait_for(from_the_mirror, timeout=120, what="an answer from the mirror's tools image")
    finally:
        api.patch(DEVICECONFIGS, "nvidia", {"spec": {"testRunner": {"toolsImage": None}}}, NAMESPACE)
    answer = answers[-1]
    assert answer["result"] == "Passed", answer
    assert [g["result"] for g in answer["gpus"]] == ["passed"] * 8
    leftovers, _ = api.list(PODS, NAMESPACE, labelSelector=f"gpuop.dev/test-tools-node={node}")
    assert all(p["metadata"].get("deletionTimestamp") for p in leftovers)


@pytest.mark.slow
def test_crd_upgrade_hook_job_runs_the_operator_image_to_completion(cluster: SimCluster) -> None:
    # What `helm upgrade` runs first: the pre-upgrade hook objects of the umbrella chart.
    hooks = [
        m
        for m in helm.template(UMBRELLA, namespace=NAMESPACE)
        if (m["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-upgrade"
    ]
    assert {m["kind"] for m in hooks} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}
    kubectl(cluster, "apply", "--validate=false", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump_all(hooks))
    (job,) = (m for m in hooks if m["kind"] == "Job")
    done = cluster.wait_for_object(
        JOBS,
        job["metadata"]["name"],
        NAMESPACE,
        lambda j: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in (j.get("status") or {}).get("conditions") or []
        ),
        timeout=60,
    )
    assert done["status"]["succeeded"] == 1
    crd = cluster.api().get(CRDS, "deviceconfigs.gpuop.dev")
    assert crd["spec"]["names"]["shortNames"] == ["gpudc"]


@pytest.mark.slow
def test_a_crd_upgrade_hook_job_whose_image_cannot_be_pulled_ends_by_its_own_deadline(
    cluster: SimCluster,
) -> None:
    """Bad input: `crds.upgradeJob.image.repository` names an image the nodes cannot pull. A kubelet
    keeps the pod Pending and retries (never Failed), so backoffLimit never ends the Job: its
    activeDeadlineSeconds does, with the reason `helm upgrade` prints (here 2 s instead of 240 s)."""
    unpullable = "registry.invalid/gpuop/no-such-operator"
    hooks = [
        m
        for m in helm.template(
            UMBRELLA,
            namespace=NAMESPACE,
            release="unpullable",
            values=[
                f"crds.upgradeJob.image.repository={unpullable}",
                "crds.upgradeJob.activeDeadlineSeconds=2",
            ],
        )
        if (m["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-upgrade"
    ]
    (job,) = (m for m in hooks if m["kind"] == "Job")
    assert job["spec"]["activeDeadlineSeconds"] == 2
    kubectl(cluster, "apply", "--validate=false", "-n", NAMESPACE, "-f", "-", stdin=yaml.safe_dump_all(hooks))
    name = job["metadata"]["name"]
    api = cluster.api()

    def pulling_pods() -> list[dict[str, Any]]:
        pods, _ = api.list(PODS, NAMESPACE, labelSelector=f"job-name={name}")
        return [
            p
            for p in pods
            if any(
                (s["state"].get("waiting") or {}).get("reason") in ("ErrImagePull", "ImagePullBackOff")
                for s in (p.get("status") or {}).get("containerStatuses") or []
            )
        ]

    (pod,) = cluster.wait_for(pulling_pods, timeout=60, what=f"{name}'s pod pulling")
    assert pod["status"]["phase"] == "Pending"

    def failed(j: dict[str, Any]) -> bool:
        return any(c["type"] == "Failed" for c in (j.get("status") or {}).get("conditions") or [])

    ended = cluster.wait_for_object(JOBS, name, NAMESPACE, failed, timeout=60)
    (condition,) = [c for c in ended["status"]["conditions"] if c["type"] == "Failed"]
    assert condition["reason"] == "DeadlineExceeded"  # not BackoffLimitExceeded: no pod ever failed


@pytest.mark.slow
def test_a_mig_profile_in_one_deviceconfig_repartitions_its_node_with_the_operator_running(
    cluster: SimCluster,
) -> None:
    """Only the NVIDIA DeviceConfig enables the config manager, so the sections differ and the
    agent reads its node's key (nodes.yaml); the operator leaves the paused operands alone."""
    cluster.wait_for(lambda: all_ready(cluster), timeout=240, what="both DeviceConfigs Ready")
    api = cluster.api()
    profile = {"name": "all-1g", "nvidia": [{"migEnabled": True, "migDevices": {"1g.10gb": 7}}]}
    manager = {"enable": True, "profiles": [profile], "quiesceTimeoutSeconds": 120}
    api.patch(DEVICECONFIGS, "nvidia", {"spec": {"configManager": manager}}, NAMESPACE)
    (node,) = (n.name for n in cluster.nodes if n.vendor == "nvidia")
    cluster.wait_for_object(
        NODES,
        node,
        None,
        lambda n: n["metadata"]["labels"].get("gpuop.dev/deploy.config-manager") == "true",
        timeout=120,
    )
    cluster.wait_for_daemonset_ready("gpuop-config-manager", NAMESPACE, timeout=180)
    api.patch(NODES, node, {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g"}}})
    try:
        done = cluster.wait_for_object(
            NODES,
            node,
            None,
            lambda n: n["metadata"]["labels"].get("gpuop.dev/gpu-config-state") in ("success", "failed"),
            timeout=300,
        )
    except Exception:
        pods, _ = api.list(PODS, NAMESPACE, labelSelector="app.kubernetes.io/name=config-manager")
        for pod in pods:
            print(pod["metadata"]["name"], log_tail(cluster, pod, "config-manager"))
        raise
    labels = done["metadata"]["labels"]
    reason = (done["metadata"].get("annotations") or {}).get("gpuop.dev/gpu-config-failure-reason", "")
    assert labels["gpuop.dev/gpu-config-state"] == "success", reason
    assert labels["nvidia.com/mig.config.state"] == "success"
    paused = {k: v for k, v in labels.items() if k.startswith("gpuop.dev/deploy.")}
    assert paused == {f"gpuop.dev/deploy.{s}": "true" for s in (*SERVICES, "config-manager")}
    cluster.wait_for_events(
        None,
        lambda events: (
            {"Quiescing", "ConfigApplied"}
            <= {e["reason"] for e in events if e["involvedObject"]["name"] == node}
        ),
        what=f"Quiescing and ConfigApplied on {node}",
    )
    cluster.wait_for(lambda: all_ready(cluster), timeout=240, what="both DeviceConfigs Ready again")
    amd_nodes = [n.name for n in cluster.nodes if n.vendor == "amd"]
    for name in amd_nodes:  # the AMD DeviceConfig did not enable it: no config manager there
        assert "gpuop.dev/deploy.config-manager" not in api.get(NODES, name)["metadata"]["labels"]
