"""charts/test-runner: lints, renders valid objects for Kubernetes 1.29 and 1.35 (DaemonSet, manual
Job, CronJob), places the DaemonSet standalone and operator-managed, keeps RBAC minimal, says why it
is privileged, and its args parse and config validate with the service's own models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_common.config import structural_schema
from gpuop_common.config.testrunner import TestRunnerConfig
from gpuop_common.settings import parse_settings
from gpuop_sim import helm
from gpuop_test_runner.settings import CheckSettings, TestRunnerSettings

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "test-runner"
JOBS = [
    "manualJob.enabled=true",
    "manualJob.nodeName=gpu-1",
    "cronJob.enabled=true",
    "cronJob.nodeName=gpu-2",
]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chart() -> Path:
    helm.dependency_build(CHART)
    return CHART


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind)


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec = doc["spec"]["jobTemplate"]["spec"] if doc["kind"] == "CronJob" else doc["spec"]
    pod: dict[str, Any] = spec["template"]["spec"]
    return pod


def test_chart_lints_strict(chart: Path) -> None:
    result = helm.lint(chart)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("kube_version", ["1.29.0", "1.35.0"])
@pytest.mark.parametrize(
    "values", [[], ["operatorManaged=true", "privileged=false", "runAsRoot=false", *JOBS]]
)
def test_rendered_objects_are_valid(chart: Path, kube_version: str, values: list[str]) -> None:
    docs = helm.template(chart, kube_version=kube_version, values=values)
    assert helm.validate_manifests(docs, kube_version) == []
    kinds = ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Role", "RoleBinding"]
    kinds.append("ServiceAccount")
    assert sorted(d["kind"] for d in docs) == sorted(kinds + (["CronJob", "Job"] if values else []))


def test_placement_standalone_and_operator_managed(chart: Path) -> None:
    pod = pod_spec(by_kind(helm.template(chart), "DaemonSet"))
    assert helm.presence_label_keys(pod) == [
        "feature.node.kubernetes.io/pci-1002.present",
        "feature.node.kubernetes.io/pci-10de.present",
    ]
    managed = pod_spec(by_kind(helm.template(chart, values=["operatorManaged=true"]), "DaemonSet"))
    assert managed["nodeSelector"] == {"gpuop.dev/deploy.test-runner": "true"}
    assert "affinity" not in managed


def test_rbac_is_nodes_get_patch_and_events_create_patch(chart: Path) -> None:
    docs = helm.template(chart, release="demo")
    assert by_kind(docs, "ClusterRole")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    # Tools-image pods, in the release namespace only.
    role = by_kind(docs, "Role")
    assert role["metadata"]["namespace"] == by_kind(docs, "RoleBinding")["metadata"]["namespace"]
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "delete"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    ]
    assert pod_spec(by_kind(docs, "DaemonSet"))["serviceAccountName"] == "demo-test-runner"


def test_tools_images_default_to_the_vendors_and_pods_know_their_namespace(chart: Path) -> None:
    secrets = ["global.imagePullSecrets={mirror}", "imagePullSecrets={own}"]
    docs = helm.template(chart, values=["runtimeClassName=nvidia", *secrets])
    config = yaml.safe_load(by_kind(docs, "ConfigMap")["data"]["config.yaml"])
    assert config["toolsImage"] == {
        "amd": "docker.io/rocm/test-runner:v1.4.1",
        "nvidia": "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04",
    }
    assert TestRunnerConfig.model_validate(config).tools_image.amd == config["toolsImage"]["amd"]
    env = {e["name"]: e for e in pod_spec(by_kind(docs, "DaemonSet"))["containers"][0]["env"]}
    assert env["GPUOP_TOOLS_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["GPUOP_TOOLS_RUNTIME_CLASS"]["value"] == "nvidia"
    assert env["GPUOP_TOOLS_IMAGE_PULL_SECRETS"]["value"] == "mirror,own"  # the mirror's pull secret
    assert "GPUOP_TOOLS_IMAGE_PULL_SECRETS" not in str(helm.template(chart))  # none: none passed


def test_privileges_follow_values_and_say_why(chart: Path) -> None:
    pod = pod_spec(by_kind(helm.template(chart), "DaemonSet"))
    assert pod["securityContext"]["runAsUser"] == 0
    assert pod["containers"][0]["securityContext"]["privileged"] is True
    template = (chart / "templates" / "_pod.tpl").read_text()
    assert "RVS and AGFHC open /dev/kfd" in template
    assert "device nodes outside a GPU allocation" in template
    plain = pod_spec(
        by_kind(helm.template(chart, values=["privileged=false", "runAsRoot=false"]), "DaemonSet")
    )
    assert plain["securityContext"]["runAsNonRoot"] is True
    assert plain["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    mounts = {m["name"]: m["mountPath"] for m in plain["containers"][0]["volumeMounts"]}
    assert mounts == {
        "sys": "/sys",
        "dev": "/dev",
        "logs": "/var/log/gpuop-test-runner",
        "config": "/etc/gpuop",
        "pod-resources": "/var/lib/kubelet/pod-resources",
    }
    logs = next(v for v in plain["volumes"] if v["name"] == "logs")
    assert logs["hostPath"] == {"path": "/var/log/gpuop-test-runner", "type": "DirectoryOrCreate"}


def test_args_parse_as_the_service_settings(chart: Path) -> None:
    docs = helm.template(chart, values=[*JOBS, "manualJob.recipe=gst_single", "keepRuns=5"])
    agent = pod_spec(by_kind(docs, "DaemonSet"))["containers"][0]
    settings = parse_settings(TestRunnerSettings, agent["args"])
    assert (settings.probe_port, settings.keep_runs, str(settings.logs_dir)) == (
        8084,
        5,
        "/var/log/gpuop-test-runner",
    )
    # The agent asks the kubelet which GPUs are held; one-shot Jobs test what they are told to.
    assert str(settings.pod_resources_socket) == "/var/lib/kubelet/pod-resources/kubelet.sock"
    assert "pod-resources" in {v["name"] for v in pod_spec(by_kind(docs, "DaemonSet"))["volumes"]}
    assert "pod-resources" not in {v["name"] for v in pod_spec(by_kind(docs, "Job"))["volumes"]}
    assert agent["livenessProbe"]["httpGet"]["port"] == 8084
    job = pod_spec(by_kind(docs, "Job"))
    assert (job["nodeName"], job["restartPolicy"]) == ("gpu-1", "Never")
    assert job["containers"][0]["args"][0] == "check"
    check = parse_settings(CheckSettings, job["containers"][0]["args"][1:])
    assert (check.recipe, check.trigger) == ("gst_single", "MANUAL")
    assert pod_spec(by_kind(docs, "CronJob"))["nodeName"] == "gpu-2"
    assert by_kind(docs, "CronJob")["spec"]["concurrencyPolicy"] == "Forbid"


def test_config_map_holds_a_valid_config_with_user_recipes(chart: Path, tmp_path: Path) -> None:
    recipes = tmp_path / "values.yaml"
    recipes.write_text(
        "config:\n  recipe: quick\n  recipes:\n"
        "  - {name: quick, framework: RVS, command: [rvs, -c, /etc/quick.conf], timeoutSeconds: 300}\n"
    )
    docs = helm.template(chart, values_files=[recipes])
    config = TestRunnerConfig.model_validate(
        yaml.safe_load(by_kind(docs, "ConfigMap")["data"]["config.yaml"])
    )
    assert (config.recipe, config.recipes[0].timeout_seconds) == ("quick", 300)


def test_values_schema_config_is_the_service_model(chart: Path) -> None:
    schema = json.loads((chart / "values.schema.json").read_text())
    assert schema["properties"]["config"] == structural_schema(TestRunnerConfig, forbid_unknown=True)


@pytest.mark.parametrize(
    "bad",
    [
        "config.trigger=SOMETIMES",
        "config.pollIntervalSeconds=1",
        "keepRuns=0",
        "manualJob.nodeName=Bad_Node",
        "podResourcesHostPath=relative/dir",
        "config.toolsImage.amd=Docker.io/ROCm/test runner:v1",
        "config.toolsImage.nvidia=nvcr.io/nvidia/dcgm:@latest",
        "x=1",
    ],
)
def test_schema_rejects_bad_values(chart: Path, bad: str) -> None:
    result = helm.lint(chart, values=[bad])
    assert result.returncode != 0
    assert bad.split("=", maxsplit=1)[0].rsplit(".", maxsplit=1)[-1] in result.stdout + result.stderr


def test_a_job_without_a_node_is_refused(chart: Path) -> None:
    result = helm.lint(chart, values=["manualJob.enabled=true"])
    assert result.returncode != 0
    assert "manualJob.nodeName: name the node to test" in result.stdout + result.stderr
