"""The client captures in the golden transcripts: the official Python client and kubectl must put
the same requests on the wire against the simulator as they did against kube-apiserver 1.36."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from gpuop_sim.apiserver import SimApiServer
from gpuop_sim.binaries import find_binary
from kubernetes import client, watch

from tools.shared_fixtures import shared_dir

# The shared/ folder sits beside the checkout (and beside CI's clone): a missing one is a
# setup error to fix, not a reason to skip.
GOLDEN = shared_dir() / "fixtures" / "kube-apiserver-1.36"

# kubectl asks /openapi/v3 for field-validation and patch metadata; the simulator serves no OpenAPI
# schemas, so create/apply run with --validate=false (kubectl then sends fieldValidation=Ignore, not
# Strict) and fall back to kubectl's compiled-in types. OpenAPI requests and that one query value
# are left out of the comparison; everything else must match the recording.
OPENAPI_PREFIX = "/openapi/"
VALIDATING = ("create", "apply")


def _captures(kind: str) -> list[dict[str, Any]]:
    lines = (GOLDEN / "misc.jsonl").read_text().splitlines()
    return [c for c in map(json.loads, lines) if kind in c]


def _wire(
    records: list[Any], drop: tuple[str, ...] = ()
) -> list[tuple[str, str, dict[str, str], str | None, str | None, int]]:
    # The recorded kubectl captures leave out kubectl's own `timeout=32s` discovery parameter.
    return [
        (
            r.method,
            r.path,
            {k: v for k, v in r.query.items() if k not in ("timeout", *drop)},
            r.content_type,
            r.accept,
            r.status,
        )
        for r in records
        if not r.path.startswith(OPENAPI_PREFIX)
    ]


def _recorded(
    reqs: list[dict[str, Any]], drop: tuple[str, ...] = ()
) -> list[tuple[str, str, dict[str, str], str | None, str | None, int]]:
    return [
        (
            r["method"],
            r["path"],
            {k: v for k, v in r["query"].items() if k not in drop},
            r["headers"].get("Content-Type"),
            r["headers"].get("Accept"),
            r["status"],
        )
        for r in reqs
        if not r["path"].startswith(OPENAPI_PREFIX)
    ]


def _seed(srv: SimApiServer) -> None:
    api = client.ApiClient(client.Configuration(host=srv.url))
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    crd = json.loads((GOLDEN / "crd-deviceconfig.json").read_text())
    client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    core.create_node({"metadata": {"name": "py-node-1"}})
    core.create_node({"metadata": {"name": "kubectl-node-1"}})
    ds_spec = {
        "selector": {"matchLabels": {"a": "b"}},
        "template": {
            "metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "example.invalid/x:1"}]},
        },
    }
    apps.create_namespaced_daemon_set("default", {"metadata": {"name": "py-ds-1"}, "spec": ds_spec})
    dc = {
        "apiVersion": "gpuop.dev/v1alpha1",
        "kind": "DeviceConfig",
        "metadata": {"name": "py-dc-1"},
        "spec": {"mode": "shared"},
    }
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "gpuop.dev", "v1alpha1", "default", "deviceconfigs", dc
    )
    api.close()


@pytest.fixture
def seeded() -> Any:
    with SimApiServer(controllers=False) as srv:
        _seed(srv)
        yield srv


def test_python_client_captures(seeded: SimApiServer) -> None:
    api = client.ApiClient(client.Configuration(host=seeded.url))
    scope = {
        "CoreV1Api": lambda: client.CoreV1Api(api),
        "AppsV1Api": lambda: client.AppsV1Api(api),
        "CustomObjectsApi": lambda: client.CustomObjectsApi(api),
        "V1ConfigMap": client.V1ConfigMap,
        "V1ObjectMeta": client.V1ObjectMeta,
        "watch": watch,
    }
    cases = _captures("python_client")
    assert len(cases) == 9
    for case in cases:
        seeded.reset_stats()
        result = eval(case["python_client"]["call"], scope)  # the recorded call text, verbatim
        if hasattr(result, "__next__"):
            list(result)
        recorded = _recorded(case["python_client"]["requests"])
        # A watch is logged when its handler returns, just after the client has read the stream's
        # end: wait for the entry rather than race it (a loaded machine lost that race once).
        deadline = time.monotonic() + 10
        while len(seeded.requests()) < len(recorded) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _wire(seeded.requests()) == recorded, case["case"]
    api.close()


@pytest.mark.slow
def test_kubectl_captures(seeded: SimApiServer, tmp_path: Path) -> None:
    kubeconfig = seeded.write_kubeconfig(tmp_path / "kubeconfig")
    files = {
        "cm-create.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "
        "kubectl-create-cm, namespace: default}\ndata: {a: '1'}\n",
        "cm-apply.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "
        "kubectl-apply-cm, namespace: default}\ndata: {a: '1'}\n",
        "cm-ssa.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: "
        "kubectl-ssa-cm, namespace: default}\ndata: {a: '1'}\n",
        "dc-apply.yaml": "apiVersion: gpuop.dev/v1alpha1\nkind: "
        "DeviceConfig\nmetadata: {name: kubectl-apply-dc, namespace: default}\n"
        "spec: {mode: shared}\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    dc = {
        "apiVersion": "gpuop.dev/v1alpha1",
        "kind": "DeviceConfig",
        "metadata": {"name": "kubectl-apply-dc"},
        "spec": {"mode": "exclusive"},
    }
    api = client.ApiClient(client.Configuration(host=seeded.url))
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "gpuop.dev", "v1alpha1", "default", "deviceconfigs", dc
    )
    api.close()
    cases = _captures("kubectl")
    assert len(cases) == 8
    for i, case in enumerate(cases):
        argv = case["kubectl"]["argv"]
        drop: tuple[str, ...] = ()
        if argv[1] in VALIDATING:
            argv = [*argv, "--validate=false"]
            drop = ("fieldValidation",)
        if case["case"] == "kubectl-apply-update":
            (tmp_path / "cm-apply.yaml").write_text(files["cm-apply.yaml"].replace("'1'", "'2'"))
        seeded.reset_stats()
        cache = tmp_path / f"cache-{i}"  # an empty cache dir: discovery requests happen, as recorded
        proc = subprocess.run(
            [
                str(find_binary("kubectl")),
                "--kubeconfig",
                str(kubeconfig),
                "--cache-dir",
                str(cache),
                *argv[1:],
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            check=False,
        )
        assert proc.returncode == case["kubectl"]["exit_code"], (case["case"], proc.stderr)
        assert _wire(seeded.requests(), drop) == _recorded(case["kubectl"]["requests"], drop), case["case"]
