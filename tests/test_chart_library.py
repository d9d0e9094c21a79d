"""charts/gpuop-lib: the named templates every service chart builds its DaemonSet from."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from gpuop_sim import helm

ROOT = Path(__file__).resolve().parents[1]

CHART_YAML = """\
apiVersion: v2
name: sample-agent
description: A service chart built from gpuop-lib
version: 0.1.0
appVersion: "0.1.0"
icon: https://gpuop.dev/icon.png
dependencies:
  - name: gpuop-lib
    version: 0.1.0
    repository: file://../gpuop-lib
"""

VALUES = """\
global:
  imageRegistry: ""
  imagePullSecrets: []
image:
  repository: gpuop/gpuop-sample-agent
  tag: ""
  pullPolicy: IfNotPresent
imagePullSecrets: []
operatorManaged: false
presenceLabels:
  - feature.node.kubernetes.io/pci-1002.present
  - feature.node.kubernetes.io/pci-10de.present
nodeSelector: {}
tolerations: []
priorityClassName: ""
logLevel: info
serviceAccount:
  create: true
  name: ""
config:
  intervalSeconds: 60
"""

DAEMONSET = """\
{{ include "gpuop.configMap" . }}
---
{{ include "gpuop.serviceAccount" . }}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ include "gpuop.fullname" . }}
  labels:
    {{- include "gpuop.labels" . | nindent 4 }}
spec:
  selector:
    matchLabels:
      {{- include "gpuop.selectorLabels" . | nindent 6 }}
  template:
    metadata:
      labels:
        {{- include "gpuop.selectorLabels" . | nindent 8 }}
    spec:
      serviceAccountName: {{ include "gpuop.serviceAccountName" . }}
      {{- include "gpuop.imagePullSecrets" . | nindent 6 }}
      {{- include "gpuop.nodePlacement" (dict "ctx" . "service" "sample-agent") | nindent 6 }}
      {{- include "gpuop.nonRootPodSecurity" . | nindent 6 }}
      containers:
        - name: agent
          image: {{ include "gpuop.image" . }}
          env:
            {{- include "gpuop.commonEnv" . | nindent 12 }}
          {{- include "gpuop.probes" 8082 | nindent 10 }}
          {{- include "gpuop.restrictedContainerSecurity" . | nindent 10 }}
"""


@pytest.fixture(scope="module")
def chart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    charts = tmp_path_factory.mktemp("charts")
    shutil.copytree(ROOT / "charts" / "gpuop-lib", charts / "gpuop-lib")
    sample = charts / "sample-agent"
    (sample / "templates").mkdir(parents=True)
    (sample / "Chart.yaml").write_text(CHART_YAML)
    (sample / "values.yaml").write_text(VALUES)
    (sample / "templates" / "daemonset.yaml").write_text(DAEMONSET)
    helm.dependency_build(sample)
    return sample


def test_library_chart_lints() -> None:
    assert helm.lint(ROOT / "charts" / "gpuop-lib").returncode == 0


@pytest.mark.parametrize("kube_version", ["1.29.0", "1.35.0"])
def test_standalone_render_selects_gpu_presence_labels_and_validates(chart: Path, kube_version: str) -> None:
    assert helm.lint(chart).returncode == 0
    docs = helm.template(chart, release="demo", kube_version=kube_version)
    assert helm.validate_manifests(docs, kube_version) == []
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert helm.presence_label_keys(pod) == [
        "feature.node.kubernetes.io/pci-1002.present",
        "feature.node.kubernetes.io/pci-10de.present",
    ]
    assert "nodeSelector" not in pod
    assert pod["containers"][0]["image"] == "gpuop/gpuop-sample-agent:0.1.0"
    assert pod["securityContext"]["runAsNonRoot"] is True
    config = helm.first_of_kind(docs, "ConfigMap")
    assert config["metadata"]["name"] == "demo-sample-agent-config"
    assert config["data"]["config.yaml"].strip() == "intervalSeconds: 60"


def test_operator_managed_render_selects_the_deploy_label(chart: Path) -> None:
    docs = helm.template(chart, values=["operatorManaged=true"])
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"gpuop.dev/deploy.sample-agent": "true"}
    assert "affinity" not in pod


def test_global_registry_and_pull_secrets_apply(chart: Path) -> None:
    docs = helm.template(
        chart,
        values=[
            "global.imageRegistry=registry.example.com",
            "global.imagePullSecrets={regcred}",
            "image.tag=1.2.3",
        ],
    )
    pod = helm.first_of_kind(docs, "DaemonSet")["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example.com/gpuop/gpuop-sample-agent:1.2.3"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
