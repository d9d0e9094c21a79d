"""charts/config-manager: lints, renders valid objects for Kubernetes 1.29 and 1.35, places the DaemonSet
standalone and operator-managed, keeps RBAC minimal, says why it is privileged, and its args and
default profiles parse with the service's own models."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_common.config import structural_schema
from gpuop_common.config.config_manager import ConfigManagerConfig
from gpuop_common.settings import parse_settings
from gpuop_config_manager.settings import ConfigManagerSettings
from gpuop_sim import helm

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "config-manager"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def chart() -> Path:
    helm.dependency_build(CHART)
    return CHART


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == kind)


def pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = doc["spec"]["template"]["spec"]
    return pod


def test_chart_lints_strict(chart: Path) -> None:
    result = helm.lint(chart)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("kube_version", ["1.29.0", "1.35.0"])
@pytest.mark.parametrize(
    "values", [[], ["operatorManaged=true", "evictGpuPods=true", "runtimeClassName=nvidia"]]
)
def test_rendered_objects_are_valid(chart: Path, kube_version: str, values: list[str]) -> None:
    docs = helm.template(chart, kube_version=kube_version, values=values)
    assert helm.validate_manifests(docs, kube_version) == []
    kinds = ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "ServiceAccount"]
    assert sorted(d["kind"] for d in docs) == kinds


def test_placement_standalone_and_operator_managed(chart: Path) -> None:
    pod = pod_spec(by_kind(helm.template(chart), "DaemonSet"))
    assert helm.presence_label_keys(pod) == [
        "feature.node.kubernetes.io/pci-1002.present",
        "feature.node.kubernetes.io/pci-10de.present",
    ]
    managed = pod_spec(by_kind(helm.template(chart, values=["operatorManaged=true"]), "DaemonSet"))
    assert managed["nodeSelector"] == {"gpuop.dev/deploy.config-manager": "true"}


def test_rbac_is_minimal_and_delete_only_with_eviction(chart: Path) -> None:
    rules = by_kind(helm.template(chart, release="demo"), "ClusterRole")["rules"]
    assert rules == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
        # A pod holding a GPU through a DRA claim blocks a repartition as one with a device-plugin GPU.
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    evicting = by_kind(helm.template(chart, values=["evictGpuPods=true"]), "ClusterRole")["rules"]
    assert evicting[1]["verbs"] == ["list", "delete"]


def test_privileged_and_says_why(chart: Path) -> None:
    pod = pod_spec(by_kind(helm.template(chart), "DaemonSet"))
    container = pod["containers"][0]
    assert container["securityContext"]["privileged"] is True
    assert pod["securityContext"]["runAsUser"] == 0
    template = (chart / "templates" / "daemonset.yaml").read_text()
    assert "needs /sys" in template and "MIG config capability" in template
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["sys"]["mountPath"] == "/sys" and not mounts["sys"].get("readOnly")


def test_args_parse_as_the_service_settings(chart: Path) -> None:
    docs = helm.template(chart, values=["evictGpuPods=true", "intervalSeconds=30"])
    container = pod_spec(by_kind(docs, "DaemonSet"))["containers"][0]
    settings = parse_settings(ConfigManagerSettings, container["args"])
    assert (settings.probe_port, settings.interval, settings.evict_gpu_pods) == (8083, 30.0, True)
    assert container["livenessProbe"]["httpGet"]["port"] == 8083


def test_driver_reload_mounts_the_host_root_read_only_and_can_be_turned_off(chart: Path) -> None:
    pod = pod_spec(by_kind(helm.template(chart), "DaemonSet"))
    container = pod["containers"][0]
    settings = parse_settings(ConfigManagerSettings, container["args"])
    assert (settings.driver_reload, settings.host_exec) == (True, "chroot /host")
    assert settings.partition_tool == "auto"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["host"] == {"name": "host", "mountPath": "/host", "readOnly": True}
    assert {"name": "host", "hostPath": {"path": "/", "type": "Directory"}} in pod["volumes"]
    # amd-smi still runs on the host without reloads, through the same mount and prefix.
    smi = pod_spec(by_kind(helm.template(chart, values=["driverReload=false"]), "DaemonSet"))
    smi_settings = parse_settings(ConfigManagerSettings, smi["containers"][0]["args"])
    assert (smi_settings.driver_reload, smi_settings.partition_tool) == (False, "auto")
    assert "host" in {v["name"] for v in smi["volumes"]}
    off = pod_spec(
        by_kind(helm.template(chart, values=["driverReload=false", "partitionTool=sysfs"]), "DaemonSet")
    )
    off_settings = parse_settings(ConfigManagerSettings, off["containers"][0]["args"])
    assert (off_settings.driver_reload, off_settings.partition_tool) == (False, "sysfs")
    assert "host" not in {v["name"] for v in off["volumes"]}
    assert not any(a.startswith("--host-exec") for a in off["containers"][0]["args"])


def test_default_profiles_are_a_valid_config(chart: Path) -> None:
    config = ConfigManagerConfig.model_validate(
        yaml.safe_load(by_kind(helm.template(chart), "ConfigMap")["data"]["config.yaml"])
    )
    names = [p.name for p in config.profiles]
    assert {"spx-nps1", "cpx-nps4", "all-disabled", "all-1g.10gb"} <= set(names)
    assert config.paused_operands == [
        "device-plugin",
        "dra-driver",
        "metrics-exporter",
        "node-labeller",
        "test-runner",
    ]


def test_values_schema_config_is_the_shared_model(chart: Path) -> None:
    schema = json.loads((chart / "values.schema.json").read_text())
    assert schema["properties"]["config"] == structural_schema(ConfigManagerConfig, forbid_unknown=True)


@pytest.mark.parametrize(
    "bad",
    [
        "config.quiesceTimeoutSeconds=0",
        "config.profiles[0].amd.computePartition=XPX",
        "intervalSeconds=0",
        "hostExec=",
        "driverReload=maybe",
        "partitionTool=rocm-smi",
        "x=1",
    ],
)
def test_schema_rejects_bad_values(chart: Path, bad: str) -> None:
    result = helm.lint(chart, values=[bad])
    assert result.returncode != 0
    key = bad.split("=", maxsplit=1)[0].rsplit(".", maxsplit=1)[-1]
    assert key in result.stdout + result.stderr
