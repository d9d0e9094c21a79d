"""charts/device-plugin rendered with the real helm and validated against the Kubernetes schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from gpuop_common.config import DevicePluginConfig
from gpuop_common.config.schema import structural_schema
from gpuop_sim import helm

CHART = Path(__file__).resolve().parents[3] / "charts" / "device-plugin"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _dependencies() -> None:
    helm.dependency_build(CHART)


def test_lints_strict() -> None:
    assert helm.lint(CHART).returncode == 0


@pytest.mark.parametrize("kube_version", ["1.29.0", "1.35.0"])
def test_standalone_render_validates_and_selects_gpu_nodes(kube_version: str) -> None:
    docs = helm.template(CHART, release="gpuop", kube_version=kube_version)
    assert helm.validate_manifests(docs, kube_version) == []
    # The plugin and the MPS control daemon (on by default, on nvidia.com/mps.capable nodes only).
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ConfigMap", "DaemonSet", "DaemonSet", "ServiceAccount"]  # no RBAC needed
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["containers"][0]["name"] == "device-plugin"
    assert helm.presence_label_keys(pod) == [
        "feature.node.kubernetes.io/pci-1002.present",
        "feature.node.kubernetes.io/pci-10de.present",
    ]
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["image"] == "gpuop/gpuop-device-plugin:0.1.0"
    sc = container["securityContext"]
    assert (
        sc["privileged"] is False and sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"]
    )
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["host-root"]["readOnly"] is True
    assert mounts["device-plugins"]["mountPath"] == "/var/lib/kubelet/device-plugins"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["device-plugins"]["hostPath"]["path"] == "/var/lib/kubelet/device-plugins"
    assert "--socket-dir=/var/lib/kubelet/device-plugins" in container["args"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8081}
    config = DevicePluginConfig.model_validate(
        yaml.safe_load(helm.first_of_kind(docs, "ConfigMap")["data"]["config.yaml"])
    )
    assert config == DevicePluginConfig()


def test_operator_managed_render_selects_the_deploy_label() -> None:
    docs = helm.template(CHART, values=["operatorManaged=true"])
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpuop.dev/deploy.device-plugin": "true"}
    assert "affinity" not in pod


def test_nvidia_runtime_class_asks_for_the_driver_library() -> None:
    docs = helm.template(CHART, values=["runtimeClassName=nvidia"])
    assert helm.validate_manifests(docs, "1.35.0") == []
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "utility"
    standalone = helm.first_of_kind(helm.template(CHART), "DaemonSet")["spec"]["template"]["spec"]
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in standalone["containers"][0]["env"]}


def test_custom_kubelet_dir_and_nvidia_privileges() -> None:
    docs = helm.template(
        CHART, values=["kubeletSocketPath=/var/lib/k0s/kubelet/device-plugins", "privileged=true"]
    )
    assert helm.validate_manifests(docs, "1.35.0") == []
    (container,) = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert "--socket-dir=/var/lib/k0s/kubelet/device-plugins" in container["args"]
    assert container["securityContext"]["privileged"] is True


@pytest.mark.parametrize(
    "bad",
    [
        "config.resourceNamingStrategy=bogus",
        "config.migStrategy=full",
        "config.typo=1",
        "healthInterval=0",
        "extra=1",
    ],
)
def test_schema_rejects_bad_values(bad: str) -> None:
    with pytest.raises(helm.ChartError) as err:
        helm.template(CHART, values=[bad])
    assert "schema" in str(err.value)


def test_config_schema_is_the_generated_one() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["config"] == structural_schema(DevicePluginConfig, forbid_unknown=True)


def test_the_mps_control_daemon_is_its_own_daemonset_on_mps_nodes_only() -> None:
    assert not any(
        d["metadata"]["name"].endswith("-mps")
        for d in helm.template(CHART, release="gpuop", values=["mpsControlDaemon.enabled=false"])
    )
    docs = helm.template(CHART, release="gpuop", values=["operatorManaged=true"])
    assert helm.validate_manifests(docs, "1.35.0") == []
    sets = {d["metadata"]["name"]: d for d in docs if d["kind"] == "DaemonSet"}
    mps = sets["gpuop-device-plugin-mps"]
    plugin = sets["gpuop-device-plugin"]
    pod = mps["spec"]["template"]["spec"]
    # Under the operator: the plugin's deploy label and the labeller's MPS label, both.
    assert pod["nodeSelector"] == {"gpuop.dev/deploy.device-plugin": "true", "nvidia.com/mps.capable": "true"}
    assert pod["containers"][0]["command"] == ["gpuop-mps-control-daemon"]
    args = pod["containers"][0]["args"]
    assert "--host-exec=chroot /host" in args
    # Its own probe port (docs/charts.md), not the labeller's 8082 on the same node.
    assert "--probe-port=8086" in args
    assert pod["containers"][0]["livenessProbe"]["httpGet"]["port"] == 8086
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["mps-root"]["mountPath"] == "/host/run/gpuop/mps"
    # The tmpfs it mounts at <root>/shm reaches the host (the clients' /dev/shm); that, and its
    # `unshare --mount`, need a privileged container.
    assert mounts["mps-root"]["mountPropagation"] == "Bidirectional"
    assert pod["containers"][0]["securityContext"]["privileged"] is True
    assert pod["securityContext"]["runAsUser"] == 0  # capabilities are root's only
    # Neither DaemonSet's selector matches the other's pods.
    plugin_sel = plugin["spec"]["selector"]["matchLabels"].items()
    assert not plugin_sel <= mps["spec"]["template"]["metadata"]["labels"].items()
    assert (
        not mps["spec"]["selector"]["matchLabels"].items()
        <= plugin["spec"]["template"]["metadata"]["labels"].items()
    )
