"""The chart checks every chart test relies on: real helm lint/template plus schema validation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpuop_sim import helm
from kubernetes.client import ApiClient, Configuration, CustomObjectsApi

CHART_YAML = """\
apiVersion: v2
name: probe
description: A chart that exercises the tooling
version: 0.1.0
appVersion: "0.1.0"
icon: https://example.invalid/icon.png
"""

DAEMONSET = """\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: {{ .Release.Name }}-agent
  labels:
    app.kubernetes.io/name: probe
spec:
  selector:
    matchLabels: {app: probe}
  template:
    metadata:
      labels: {app: probe}
    spec:
      {{- if .Values.bogusField }}
      bogusField: true
      {{- end }}
      containers:
        - name: agent
          image: {{ .Values.image | quote }}
"""

CRD = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.dev
spec:
  group: example.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer, minimum: 1}
"""

WIDGET = """\
apiVersion: example.dev/v1
kind: Widget
metadata:
  name: w
spec:
  size: {{ .Values.size }}
"""


@pytest.fixture
def chart(tmp_path: Path) -> Path:
    root = tmp_path / "probe"
    (root / "templates").mkdir(parents=True)
    (root / "crds").mkdir()
    (root / "Chart.yaml").write_text(CHART_YAML)
    (root / "values.yaml").write_text('image: "ghcr.io/example/agent:0.1.0"\nsize: 3\nbogusField: false\n')
    (root / "templates" / "daemonset.yaml").write_text(DAEMONSET)
    (root / "templates" / "widget.yaml").write_text(WIDGET)
    (root / "crds" / "widgets.yaml").write_text(CRD)
    return root


def test_lint_and_template_a_valid_chart(chart: Path) -> None:
    assert helm.lint(chart).returncode == 0
    docs = helm.template(chart, kube_version="1.29.0")
    assert [d["kind"] for d in docs] == ["CustomResourceDefinition", "DaemonSet", "Widget"]
    assert helm.validate_manifests(docs, "1.29.0") == []
    assert helm.validate_manifests(docs, "1.35.0") == []


def test_unknown_field_in_a_builtin_object_is_reported(chart: Path) -> None:
    docs = helm.template(chart, values=["bogusField=true"])
    problems = helm.validate_manifests(docs, "1.35.0")
    assert len(problems) == 1
    assert problems[0].startswith("DaemonSet/gpuop-agent: ")
    assert "bogusField" in problems[0]


def test_custom_resource_is_checked_against_its_crd(chart: Path) -> None:
    docs = helm.template(chart, values=["size=0"])
    problems = helm.validate_manifests(docs, "1.35.0")
    assert problems == ["Widget/w: spec.size: 0 is less than the minimum of 1"]


def test_broken_template_fails_lint_and_template_with_helms_message(chart: Path) -> None:
    (chart / "templates" / "broken.yaml").write_text("{{ .Values.missing.deeper }}\n")
    result = helm.lint(chart)
    assert result.returncode != 0
    assert "nil pointer" in result.stdout + result.stderr
    with pytest.raises(helm.ChartError, match="nil pointer"):
        helm.template(chart)


def test_charts_in_lists_chart_folders(chart: Path) -> None:
    assert helm.charts_in(chart.parent) == [chart]


def test_kubectl_install_applies_crds_first_then_their_resources(chart: Path, sim_apiserver: Any) -> None:
    kubeconfig = sim_apiserver.write_kubeconfig(chart.parent / "kubeconfig")
    installed = helm.kubectl_install(kubeconfig, chart, namespace="probe-system", release="demo")
    assert sorted(d["kind"] for d in installed) == ["CustomResourceDefinition", "DaemonSet", "Widget"]
    api = ApiClient(Configuration())
    api.configuration.host = sim_apiserver.url
    widget = CustomObjectsApi(api).get_namespaced_custom_object(
        "example.dev", "v1", "probe-system", "widgets", "w"
    )
    assert widget["spec"] == {"size": 3}


def test_kubectl_install_reports_kubectl_errors(chart: Path, sim_apiserver: Any) -> None:
    kubeconfig = sim_apiserver.write_kubeconfig(chart.parent / "kubeconfig")
    with pytest.raises(helm.ChartError, match="kubectl"):
        helm.kubectl_install(kubeconfig, chart, namespace="Not_A_Valid_Namespace")
