"""OpenAPI discovery and what the real clients do with it: kubectl explain and validating apply,
kubectl create namespace / secret (protobuf), and helm install / upgrade / rollback / uninstall of a
small chart (release Secrets sent as protobuf) against a bare simulated API server."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_sim.apiserver import SimApiServer
from gpuop_sim.apiserver.openapi import OpenApi, builtin_unknown_fields, schema_name
from gpuop_sim.binaries import find_binary

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "gadgets.oa.gpuop.dev"},
    "spec": {
        "group": "oa.gpuop.dev",
        "scope": "Cluster",
        "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "description": "What the gadget does.",
                                "properties": {
                                    "speed": {"type": "integer", "description": "Turns per second."}
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}
BAD_DAEMONSET = """\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: strict-ds, namespace: default}
spec:
  selector: {matchLabels: {app: strict}}
  template:
    metadata: {labels: {app: strict}}
    spec:
      containers:
      - name: agent
        image: busybox
        bogusField: 1
"""


@pytest.fixture(scope="module")
def server() -> Iterator[SimApiServer]:
    with SimApiServer() as sim:
        request = urllib.request.Request(
            sim.url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            data=json.dumps(CRD).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        urllib.request.urlopen(request, timeout=10).read()
        yield sim


@pytest.fixture(scope="module")
def kubeconfig(server: SimApiServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return server.write_kubeconfig(tmp_path_factory.mktemp("openapi") / "kubeconfig")


def _get(server: SimApiServer, path: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(server.url + path, timeout=30) as response:
        return response.headers["Content-Type"], response.read()


def _run(binary: str, kubeconfig: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [str(find_binary(binary)), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_index_lists_every_served_group_version_with_a_hash(server: SimApiServer) -> None:
    ctype, body = _get(server, "/openapi/v3")
    assert ctype.startswith("text/plain")  # as the real server labels it
    paths = json.loads(body)["paths"]
    assert {"api/v1", "apis/apps/v1", "apis/batch/v1", "apis/oa.gpuop.dev/v1"} <= set(paths)
    url = paths["apis/apps/v1"]["serverRelativeURL"]
    assert url.startswith("/openapi/v3/apis/apps/v1?hash=") and len(url.split("=")[1]) == 128
    _, document = _get(server, url)
    assert "io.k8s.api.apps.v1.DaemonSet" in json.loads(document)["components"]["schemas"]


def test_crd_document_has_the_published_shape(server: SimApiServer) -> None:
    _, body = _get(server, "/openapi/v3/apis/oa.gpuop.dev/v1")
    doc = json.loads(body)
    schemas = doc["components"]["schemas"]
    gadget = schemas[schema_name("oa.gpuop.dev", "v1", "Gadget")]
    assert gadget["x-kubernetes-group-version-kind"] == [
        {"group": "oa.gpuop.dev", "kind": "Gadget", "version": "v1"}
    ]
    assert gadget["properties"]["metadata"]["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    ]
    assert "dev.gpuop.oa.v1.GadgetList" in schemas
    # Cluster-scoped: no namespace in any path or parameter, operation ids without "Namespaced".
    assert sorted(doc["paths"]) == ["/apis/oa.gpuop.dev/v1/gadgets", "/apis/oa.gpuop.dev/v1/gadgets/{name}"]
    operations = [op for item in doc["paths"].values() for op in item.values() if isinstance(op, dict)]
    assert operations and not any("Namespaced" in op["operationId"] for op in operations)
    parameters = [p for item in doc["paths"].values() for p in item.get("parameters", [])]
    assert "namespace" not in {p["name"] for p in parameters}
    assert (
        doc["paths"]["/apis/oa.gpuop.dev/v1/gadgets/{name}"]["get"]["operationId"] == "readOaGpuopDevV1Gadget"
    )


def test_v2_is_json_only(server: SimApiServer) -> None:
    _, body = _get(server, "/openapi/v2")
    assert "dev.gpuop.oa.v1.Gadget" in json.loads(body)["definitions"]
    request = urllib.request.Request(
        server.url + "/openapi/v2",
        headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 406


def test_unknown_fields_of_built_in_kinds_are_found_at_any_depth() -> None:
    """Bad inputs: a field nowhere in the DaemonSet schema, inside a container and at the top."""
    ds = yaml.safe_load(BAD_DAEMONSET)
    ds["spec"]["template"]["metadata"]["managedFields"] = [{"fieldsV1": {"f:anything": {}}}]
    ds["extra"] = True
    found = builtin_unknown_fields("apps", "v1", "DaemonSet", ds)
    assert found == ["spec.template.spec.containers[0].bogusField", "extra"]  # document order
    assert "bogusField" not in ds["spec"]["template"]["spec"]["containers"][0]
    # Free-form objects (FieldsV1) keep what they hold; a kind with no recorded schema says so.
    assert ds["spec"]["template"]["metadata"]["managedFields"][0]["fieldsV1"] == {"f:anything": {}}
    assert builtin_unknown_fields("example.com", "v1", "Thing", {}) is None


def test_cache_key_changes_with_crds(server: SimApiServer) -> None:
    api = OpenApi(server.registry)
    assert api.v2_bytes() is api.v2_bytes()


@pytest.mark.slow
def test_kubectl_explain_and_strict_apply(kubeconfig: Path, tmp_path: Path) -> None:
    explained = _run("kubectl", kubeconfig, "explain", "gadget.spec")
    assert explained.returncode == 0, explained.stderr
    assert "What the gadget does." in explained.stdout and "Turns per second." in explained.stdout
    manifest = tmp_path / "ds.yaml"
    manifest.write_text(BAD_DAEMONSET)
    strict = _run("kubectl", kubeconfig, "apply", "--validate=strict", "-f", str(manifest))
    assert strict.returncode == 1
    assert (
        'DaemonSet in version "v1" cannot be handled as a DaemonSet: strict decoding error: '
        'unknown field "spec.template.spec.containers[0].bogusField"'
    ) in strict.stderr
    warned = _run("kubectl", kubeconfig, "apply", "--validate=warn", "-f", str(manifest))
    assert warned.returncode == 0, warned.stderr
    assert 'unknown field "spec.template.spec.containers[0].bogusField"' in warned.stderr


@pytest.mark.slow
def test_kubectl_create_sends_protobuf_and_succeeds(server: SimApiServer, kubeconfig: Path) -> None:
    server.reset_stats()
    created = _run("kubectl", kubeconfig, "create", "namespace", "pb-ns")
    assert created.returncode == 0, created.stderr
    secret = _run(
        "kubectl", kubeconfig, "-n", "pb-ns", "create", "secret", "generic", "s", "--from-literal=k=v"
    )
    assert secret.returncode == 0, secret.stderr
    deleted = _run("kubectl", kubeconfig, "-n", "pb-ns", "delete", "secret", "s")
    assert deleted.returncode == 0, deleted.stderr
    writes = [r for r in server.requests() if r.method in ("POST", "DELETE")]
    assert [r.content_type for r in writes if r.method == "POST"] == [
        "application/vnd.kubernetes.protobuf"
    ] * 2


CHART = {
    "Chart.yaml": "apiVersion: v2\nname: probe\nversion: 0.1.0\n",
    "values.yaml": "size: 1\n",
    "templates/cm.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: probe-settings}\n"
        'data: {size: "{{ .Values.size }}"}\n'
    ),
    "templates/hooks.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe-hook-late\n  annotations:\n"
        '    helm.sh/hook: pre-install,pre-upgrade\n    helm.sh/hook-weight: "5"\ndata: {}\n'
        "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: probe-hook-early\n  annotations:\n"
        '    helm.sh/hook: pre-install,pre-upgrade\n    helm.sh/hook-weight: "-5"\ndata: {}\n'
    ),
}


@pytest.mark.slow
def test_helm_release_lifecycle(server: SimApiServer, kubeconfig: Path, tmp_path: Path) -> None:
    chart = tmp_path / "probe"
    for name, text in CHART.items():
        (chart / name).parent.mkdir(parents=True, exist_ok=True)
        (chart / name).write_text(text)
    env = {"HELM_CACHE_HOME": str(tmp_path / "cache"), "HELM_CONFIG_HOME": str(tmp_path / "config")}

    def helm(*args: str) -> str:
        done = _run("helm", kubeconfig, *args, env=env)
        assert done.returncode == 0, f"helm {' '.join(args)}: {done.stderr}"
        return str(done.stdout)

    def settings() -> str:
        done = _run(
            "kubectl", kubeconfig, "-n", "probe", "get", "cm", "probe-settings", "-o", "jsonpath={.data.size}"
        )
        return str(done.stdout)

    server.reset_stats()
    helm("install", "probe", str(chart), "-n", "probe", "--create-namespace", "--wait")
    posts = [r.path for r in server.requests() if r.method == "POST" and r.path.endswith("/configmaps")]
    assert posts == ["/api/v1/namespaces/probe/configmaps"] * 3  # early hook, late hook, then the chart
    assert settings() == "1"
    releases = json.loads(helm("list", "-n", "probe", "-o", "json"))
    assert [(r["name"], r["revision"], r["status"]) for r in releases] == [("probe", "1", "deployed")]
    helm("upgrade", "probe", str(chart), "-n", "probe", "--set", "size=3", "--wait")
    assert settings() == "3"
    assert json.loads(helm("get", "values", "probe", "-n", "probe", "-o", "json")) == {"size": 3}
    helm("rollback", "probe", "1", "-n", "probe", "--wait")
    assert settings() == "1"
    assert "REVISION: 3" in helm("status", "probe", "-n", "probe")
    helm("uninstall", "probe", "-n", "probe", "--wait")
    left = _run(
        "kubectl", kubeconfig, "-n", "probe", "get", "secrets,configmaps", "-l", "owner=helm", "-o", "name"
    )
    assert left.stdout.strip() == ""
    assert _run("kubectl", kubeconfig, "-n", "probe", "get", "cm", "probe-settings").returncode == 1


@pytest.mark.slow
def test_kubectl_diff_shows_a_change_and_nothing_when_equal(kubeconfig: Path, tmp_path: Path) -> None:
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: difftest, namespace: default}\ndata: {a: '1'}\n"
    )
    assert _run("kubectl", kubeconfig, "apply", "-f", str(manifest)).returncode == 0
    assert _run("kubectl", kubeconfig, "diff", "-f", str(manifest)).returncode == 0
    manifest.write_text(manifest.read_text().replace("'1'", "'2'"))
    changed = _run("kubectl", kubeconfig, "diff", "-f", str(manifest))
    assert changed.returncode == 1, changed.stderr  # 1: differences found
    assert '-  a: "1"' in changed.stdout and '+  a: "2"' in changed.stdout
