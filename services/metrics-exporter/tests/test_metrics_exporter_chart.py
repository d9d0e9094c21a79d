"""charts/metrics-exporter rendered with the real helm and validated against the Kubernetes schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from gpuop_common.config import MetricsExporterConfig
from gpuop_common.config.schema import structural_schema
from gpuop_sim import helm

CHART = Path(__file__).resolve().parents[3] / "charts" / "metrics-exporter"
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
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
    # No Role/ClusterRole: pod names come from the kubelet socket, not the API server.
    assert sorted(d["kind"] for d in docs) == ["ConfigMap", "DaemonSet", "Service", "ServiceAccount"]
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert helm.presence_label_keys(pod) == [
        "feature.node.kubernetes.io/pci-1002.present",
        "feature.node.kubernetes.io/pci-10de.present",
    ]
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert container["image"] == "gpuop/gpuop-metrics-exporter:0.1.0"
    assert container["ports"] == [{"name": "metrics", "containerPort": 5000, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": 5000}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": 5000}
    assert "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in container["args"]
    assert "--port=5000" in container["args"]
    sc = container["securityContext"]
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["readOnlyRootFilesystem"] and not sc["privileged"]
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["host-root"] == {"name": "host-root", "mountPath": "/host", "readOnly": True}
    assert mounts["pod-resources"]["readOnly"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    service = helm.first_of_kind(docs, "Service")["spec"]
    assert service["ports"] == [{"name": "metrics", "port": 5000, "targetPort": "metrics", "protocol": "TCP"}]
    assert service["internalTrafficPolicy"] == "Local"
    config = MetricsExporterConfig.model_validate(
        yaml.safe_load(helm.first_of_kind(docs, "ConfigMap")["data"]["config.yaml"])
    )
    assert config == MetricsExporterConfig()


def test_operator_managed_render_selects_the_deploy_label() -> None:
    docs = helm.template(CHART, values=["operatorManaged=true", "enabled=true"])
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpuop.dev/deploy.metrics-exporter": "true"}
    assert "affinity" not in pod


def test_dcgm_port_and_no_pod_attribution_run_non_root() -> None:
    docs = helm.template(CHART, values=["config.port=9400", "podAttribution=false", "service.type=NodePort"])
    assert helm.validate_manifests(docs, "1.35.0") == []
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["ports"][0]["containerPort"] == 9400
    assert "pod-resources" not in {m["name"] for m in container["volumeMounts"]}
    service = helm.first_of_kind(docs, "Service")["spec"]
    assert service["type"] == "NodePort" and service["externalTrafficPolicy"] == "Local"


def test_service_monitor_only_where_the_api_exists() -> None:
    values = ["config.serviceMonitor.enable=true", "config.serviceMonitor.interval=15s"]
    without = helm.template(CHART, values=values)
    assert "ServiceMonitor" not in {d["kind"] for d in without}
    docs = helm.template(CHART, values=values, api_versions=[SERVICE_MONITOR_API])
    monitor = helm.first_of_kind(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == "metrics" and endpoint["interval"] == "15s" and endpoint["honorLabels"] is True
    assert (
        monitor["spec"]["selector"]["matchLabels"] == helm.first_of_kind(docs, "Service")["spec"]["selector"]
    )
    builtin = [d for d in docs if d["kind"] != "ServiceMonitor"]
    assert helm.validate_manifests(builtin, "1.35.0") == []
    # Off by default even where the API exists.
    assert "ServiceMonitor" not in {
        d["kind"] for d in helm.template(CHART, api_versions=[SERVICE_MONITOR_API])
    }


def test_dashboard_configmap_holds_valid_grafana_json_on_neutral_metrics() -> None:
    docs = helm.template(CHART, values=["dashboards.enabled=true"])
    (dashboard_cm,) = [d for d in docs if d["kind"] == "ConfigMap" and "dashboard" in d["metadata"]["name"]]
    assert dashboard_cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(dashboard_cm["data"]["gpuop-gpus.json"])
    assert dashboard == json.loads((CHART / "dashboards" / "gpuop-gpus.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert exprs and all("gpuop_" in e for e in exprs)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


@pytest.mark.parametrize(
    "bad",
    [
        "config.namingSets={bogus}",
        "config.collectionIntervalSeconds=0",
        "config.port=70000",
        "config.typo=1",
        "service.type=LoadBalancer",
        "extra=1",
    ],
)
def test_schema_rejects_bad_values(bad: str) -> None:
    with pytest.raises(helm.ChartError) as err:
        helm.template(CHART, values=[bad])
    assert "schema" in str(err.value)


def test_config_schema_is_the_generated_one() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["config"] == structural_schema(MetricsExporterConfig, forbid_unknown=True)
