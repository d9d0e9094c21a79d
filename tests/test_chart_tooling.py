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


LIB_CHART = """\
apiVersion: v2
name: lib
version: 0.1.0
type: library
"""

USES_LIB = """\
apiVersion: v2
name: {name}
version: 0.1.0
appVersion: "0.1.0"
dependencies:
  - name: {dep}
    version: {version}
    repository: {repository}
"""


def _chart(root: Path, name: str, text: str) -> Path:
    chart = root / name
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(text)
    return chart


def test_a_file_dependency_with_file_dependencies_is_refused_with_the_reason(tmp_path: Path) -> None:
    _chart(tmp_path, "lib", LIB_CHART)
    _chart(
        tmp_path, "svc", USES_LIB.format(name="svc", dep="lib", version="0.1.0", repository="file://../lib")
    )
    top = _chart(
        tmp_path, "top", USES_LIB.format(name="top", dep="svc", version="0.1.0", repository="file://../svc")
    )
    problems = helm.nested_local_dependencies(top)
    assert len(problems) == 1
    assert "svc/Chart.yaml: file:// dependencies ['lib'] would be missing when top packs svc" in problems[0]
    with pytest.raises(helm.ChartError, match="would be missing"):
        helm.dependency_build(top)


def test_in_tree_dependency_builds_and_a_stale_archive_of_it_is_removed(tmp_path: Path) -> None:
    _chart(tmp_path, "lib", LIB_CHART)
    (tmp_path / "lib" / "templates" / "_x.tpl").write_text('{{- define "lib.x" -}}x{{- end -}}\n')
    svc = _chart(tmp_path, "svc", USES_LIB.format(name="svc", dep="lib", version="0.1.0", repository='""'))
    (svc / "templates" / "cm.yaml").write_text(
        'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  x: {{ include "lib.x" . | quote }}\n'
    )
    (svc / "charts").mkdir()
    (svc / "charts" / "lib").symlink_to("../../lib")
    stale = svc / "charts" / "lib-0.0.9.tgz"
    stale.write_bytes(b"left by an old build")
    other = svc / "charts" / "library-1.0.0.tgz"
    other.write_bytes(b"another chart's archive")
    assert helm.stale_archives(svc) == [stale]
    other.unlink()
    helm.dependency_build(svc)
    assert not stale.exists()
    top = _chart(
        tmp_path, "top", USES_LIB.format(name="top", dep="svc", version="0.1.0", repository="file://../svc")
    )
    stale.write_bytes(b"left by an old build")  # the umbrella's build clears its subcharts' too
    helm.dependency_build(top)
    assert not stale.exists()
    (configmap,) = helm.template(top)
    assert configmap["data"] == {"x": "x"}


def test_a_lock_left_from_before_a_version_change_is_re_resolved(tmp_path: Path) -> None:
    lib = _chart(tmp_path, "lib", LIB_CHART)
    top = _chart(
        tmp_path, "top", USES_LIB.format(name="top", dep="lib", version="0.1.0", repository="file://../lib")
    )
    helm.dependency_build(top)
    # Chart.lock is git-ignored: after a pull that bumps both versions, the old lock is still there.
    (lib / "Chart.yaml").write_text(LIB_CHART.replace("0.1.0", "0.2.0"))
    (top / "Chart.yaml").write_text(
        USES_LIB.format(name="top", dep="lib", version="0.2.0", repository="file://../lib")
    )
    helm.dependency_build(top)
    assert "version: 0.2.0" in (top / "Chart.lock").read_text()
    assert (top / "charts" / "lib-0.2.0.tgz").is_file()


def test_package_writes_the_archive_and_show_chart_reads_it(chart: Path, tmp_path: Path) -> None:
    archive = helm.package(chart, tmp_path / "dist")
    assert archive == tmp_path / "dist" / "probe-0.1.0.tgz"
    assert helm.show_chart(archive)["name"] == "probe"
    assert [d["kind"] for d in helm.template(archive)] == ["CustomResourceDefinition", "DaemonSet", "Widget"]


def test_chart_meta_names_the_file_when_chart_yaml_is_missing(tmp_path: Path) -> None:
    with pytest.raises(helm.ChartError, match=r"nothing/Chart.yaml"):
        helm.chart_meta(tmp_path / "nothing")
