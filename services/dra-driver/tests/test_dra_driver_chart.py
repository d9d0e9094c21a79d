"""charts/dra-driver rendered with the real helm, validated against the Kubernetes schemas and
applied to the simulated API server (which compiles DeviceClass CEL as kube-apiserver 1.36 does)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpuop_common.kubejson import DEVICECLASSES, KubeJson, Resource
from gpuop_sim import helm

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "dra-driver"
UMBRELLA = ROOT / "charts" / "gpu-operator"
CLAIM_TEMPLATES = Resource("resource.k8s.io/v1", "resourceclaimtemplates", "ResourceClaimTemplate")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _dependencies() -> None:
    helm.dependency_build(CHART)
    helm.dependency_build(UMBRELLA)


def test_lints_strict() -> None:
    assert helm.lint(CHART).returncode == 0


def test_standalone_render_validates_and_selects_gpu_nodes() -> None:
    docs = helm.template(CHART, release="gpuop", kube_version="1.35.0")
    assert helm.validate_manifests(docs, "1.35.0") == []
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet"] + ["DeviceClass"] * 7 + [
        "ServiceAccount"
    ]
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert helm.presence_label_keys(pod) == [
        "feature.node.kubernetes.io/pci-1002.present",
        "feature.node.kubernetes.io/pci-10de.present",
    ]
    (container,) = pod["containers"]
    assert container["image"] == "gpuop/gpuop-dra-driver:0.1.0"
    assert {
        "--plugins-dir=/var/lib/kubelet/plugins",
        "--registry-dir=/var/lib/kubelet/plugins_registry",
        "--cdi-spec-dir=/var/run/cdi",
    } <= set(container["args"])
    # Its own probe port (docs/charts.md): never the device plugin's 8081.
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 8085}
    assert "--probe-port=8085" in container["args"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["host-root"]["readOnly"] is True
    assert mounts["plugins-registry"]["mountPath"] == "/var/lib/kubelet/plugins_registry"
    # The draDriver section (sharing) from the ConfigMap the operator projects into, hot-reloaded.
    assert (
        mounts["config"]["mountPath"] == "/etc/gpuop"
        and "--config-file=/etc/gpuop/config.yaml" in container["args"]
    )
    config_map = helm.first_of_kind(docs, "ConfigMap")
    assert config_map["metadata"]["name"] == "gpuop-dra-driver-config"
    assert {v["name"]: v for v in pod["volumes"]}["config"]["configMap"]["name"] == "gpuop-dra-driver-config"
    sc = container["securityContext"]
    assert (
        sc["privileged"] is False and sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"]
    )
    rules = {
        (tuple(r["apiGroups"]), tuple(r["resources"])): set(r["verbs"])
        for r in helm.first_of_kind(docs, "ClusterRole")["rules"]
    }
    assert rules[(("resource.k8s.io",), ("resourceslices",))] >= {"create", "update", "delete", "list"}
    assert rules[(("resource.k8s.io",), ("resourceclaims",))] == {"get"}
    assert rules[(("",), ("nodes",))] == {"get"}


def test_operator_managed_render_selects_the_deploy_label() -> None:
    docs = helm.template(CHART, values=["operatorManaged=true"])
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpuop.dev/deploy.dra-driver": "true"}
    assert "affinity" not in pod


def test_rendered_only_where_resource_k8s_io_v1_is_served() -> None:
    with pytest.raises(helm.ChartError, match=r"requires kubeVersion: >=1\.34"):
        helm.template(CHART, kube_version="1.33.0")
    # Under the umbrella (which ignores a subchart's kubeVersion) the gate renders nothing...
    old = helm.template(UMBRELLA, kube_version="1.33.0")
    assert not [d for d in old if d["apiVersion"].startswith("resource.k8s.io")]
    assert not [d for d in old if "dra-driver" in d["metadata"]["name"]]
    # ...and everything where discovery lists the API, whatever the version helm was told.
    served = helm.template(UMBRELLA, kube_version="1.33.0", api_versions=["resource.k8s.io/v1/DeviceClass"])
    assert helm.first_of_kind(served, "DeviceClass")["metadata"]["name"] == "gpu.gpuop.dev"


def test_umbrella_refuses_device_plugin_and_dra_driver_on_the_same_nodes() -> None:
    docs = helm.template(UMBRELLA)  # both operator-managed: the DeviceConfig picks one per node
    names = {d["metadata"]["name"] for d in docs if d["kind"] == "DaemonSet"}
    assert {"gpuop-device-plugin", "gpuop-dra-driver"} <= names
    for values in (["dra-driver.operatorManaged=false"], ["device-plugin.operatorManaged=false"]):
        with pytest.raises(helm.ChartError, match="both would serve the GPUs of the same nodes"):
            helm.template(UMBRELLA, values=values)
    alone = helm.template(
        UMBRELLA, values=["device-plugin.enabled=false", "dra-driver.operatorManaged=false"]
    )
    assert "gpuop-device-plugin" not in {d["metadata"]["name"] for d in alone if d["kind"] == "DaemonSet"}


def test_device_classes_and_claim_templates_are_accepted_by_the_api_server(kube_api_client: Any) -> None:
    api = KubeJson(kube_api_client)
    docs = helm.template(CHART, values=["exampleClaimTemplates.create=true"], namespace="default")
    assert helm.validate_manifests(docs, "1.35.0") == []
    classes = [d for d in docs if d["kind"] == "DeviceClass"]
    for doc in classes:
        api.create(DEVICECLASSES, doc)  # the simulated server compiles the CEL and checks it is bool
    stored = {c["metadata"]["name"]: c for c in api.list(DEVICECLASSES)[0]}
    assert set(stored) == {
        "gpu.gpuop.dev",
        "amd.gpu.gpuop.dev",
        "nvidia.gpu.gpuop.dev",
        "whole.gpu.gpuop.dev",
        "partition.gpu.gpuop.dev",
        "cpx.amd.gpu.gpuop.dev",
        "mig.nvidia.gpu.gpuop.dev",
    }
    cpx = stored["cpx.amd.gpu.gpuop.dev"]["spec"]["selectors"][0]["cel"]["expression"]
    assert "partitionProfile.startsWith('cpx_')" in cpx
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ResourceClaimTemplate"}
    assert set(templates) == {"one-gpu", "one-cpx-partition", "two-gpus-one-xgmi-hive"}
    for doc in templates.values():
        api.create(CLAIM_TEMPLATES, doc, "default")
    pair = api.get(CLAIM_TEMPLATES, "two-gpus-one-xgmi-hive", "default")["spec"]["spec"]["devices"]
    assert pair["constraints"] == [{"requests": ["gpus"], "matchAttribute": "gpu.gpuop.dev/xgmiHive"}]
    assert pair["requests"][0]["exactly"]["count"] == 2
    one = api.get(CLAIM_TEMPLATES, "one-gpu", "default")["spec"]["spec"]["devices"]["requests"][0]
    assert one["exactly"]["allocationMode"] == "ExactCount"  # the server's default


@pytest.mark.parametrize(
    "bad",
    [
        "interval=0",
        "kubeletPluginsDir=relative",
        "deviceClasses.typo=1",
        "extra=1",
        "image.pullPolicy=Sometimes",
    ],
)
def test_schema_rejects_bad_values(bad: str) -> None:
    with pytest.raises(helm.ChartError) as err:
        helm.template(CHART, values=[bad])
    assert "schema" in str(err.value)
