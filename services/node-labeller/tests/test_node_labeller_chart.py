"""charts/node-labeller: lints, renders valid objects for Kubernetes 1.29 and 1.35, places the DaemonSet
standalone and operator-managed, keeps RBAC minimal and rejects bad values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_common.config import structural_schema
from gpuop_common.config.node_labeller import NodeLabellerConfig
from gpuop_sim import helm

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "node-labeller"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chart() -> Path:
    helm.dependency_build(CHART)
    return CHART


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind)


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = by_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    return spec


def test_chart_lints_strict(chart: Path) -> None:
    result = helm.lint(chart)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("kube_version", ["1.29.0", "1.35.0"])
@pytest.mark.parametrize("values", [[], ["operatorManaged=true", "udev=false", "migStrategy=mixed"]])
def test_rendered_objects_are_valid(chart: Path, kube_version: str, values: list[str]) -> None:
    docs = helm.template(chart, kube_version=kube_version, values=values)
    assert helm.validate_manifests(docs, kube_version) == []
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "ServiceAccount",
    ]  # fmt: skip


def test_standalone_selects_gpu_presence_labels(chart: Path) -> None:
    pod = pod_spec(helm.template(chart))
    assert helm.presence_label_keys(pod) == [
        "feature.node.kubernetes.io/pci-1002.present",
        "feature.node.kubernetes.io/pci-10de.present",
    ]
    assert "nodeSelector" not in pod


def test_operator_managed_selects_the_deploy_label(chart: Path) -> None:
    pod = pod_spec(helm.template(chart, values=["operatorManaged=true"]))
    assert pod["nodeSelector"] == {"gpuop.dev/deploy.node-labeller": "true"}
    assert "affinity" not in pod


def test_rbac_is_get_and_patch_on_nodes_and_patch_on_nodes_status_only(chart: Path) -> None:
    docs = helm.template(chart, release="demo")
    assert by_kind(docs, "ClusterRole")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
    ]
    binding = by_kind(docs, "ClusterRoleBinding")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "demo-node-labeller", "namespace": "gpu-operator"}
    ]
    assert pod_spec(docs)["serviceAccountName"] == "demo-node-labeller"


def test_runs_non_root_with_read_only_sysfs(chart: Path) -> None:
    pod = pod_spec(helm.template(chart))
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert "privileged" not in container["securityContext"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["sys"] == {"name": "sys", "mountPath": "/sys", "readOnly": True}
    assert container["image"] == "gpuop/gpuop-node-labeller:0.1.0"
    assert container["ports"] == [{"name": "probes", "containerPort": 8082, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"]["port"] == 8082


def test_args_follow_values(chart: Path) -> None:
    args = pod_spec(helm.template(chart, values=["udev=false", "migStrategy=single"]))["containers"][0][
        "args"
    ]
    assert args == [
        "--config-file=/etc/gpuop/config.yaml",
        "--probe-port=8082",
        "--mig-strategy=single",
        "--no-udev",
    ]


def test_config_map_holds_a_valid_node_labeller_config(chart: Path) -> None:
    docs = helm.template(chart, values=["config.betaLabels=false"])
    text = by_kind(docs, "ConfigMap")["data"]["config.yaml"]
    config = NodeLabellerConfig.model_validate(yaml.safe_load(text))
    assert config.beta_labels is False
    assert config.label_sets == ["amd", "nvidia", "neutral"]


def test_values_schema_config_is_the_shared_model(chart: Path) -> None:
    schema = json.loads((chart / "values.schema.json").read_text())
    assert schema["properties"]["config"] == structural_schema(NodeLabellerConfig, forbid_unknown=True)


@pytest.mark.parametrize(
    "bad",
    ["migStrategy=sometimes", "config.labelSets={amd,intel}", "config.intervalSeconds=1", "unknownKey=1"],
)
def test_schema_rejects_bad_values(chart: Path, bad: str) -> None:
    result = helm.lint(chart, values=[bad])
    assert result.returncode != 0
    assert bad.split("=", maxsplit=1)[0].rsplit(".", maxsplit=1)[-1] in result.stdout + result.stderr
