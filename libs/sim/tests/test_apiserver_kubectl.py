"""The real kubectl 1.32 against the simulator: get, apply (create/configure/unchanged), label, watch."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from gpuop_sim.apiserver import SimApiServer
from gpuop_sim.binaries import find_binary

pytestmark = pytest.mark.slow

BUNDLE = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.gpuop.dev
spec:
  group: example.gpuop.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
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
---
apiVersion: v1
kind: Namespace
metadata:
  name: bundle
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: op, namespace: bundle}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: op}
rules:
- {apiGroups: [""], resources: [nodes], verbs: [get, list, watch, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: op}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: op}
subjects:
- {kind: ServiceAccount, name: op, namespace: bundle}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: op-config, namespace: bundle}
data: {level: "VALUE"}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: dp, namespace: bundle}
spec:
  selector: {matchLabels: {app: dp}}
  template:
    metadata: {labels: {app: dp}}
    spec:
      containers:
      - {name: dp, image: example.invalid/dp:1, env: [{name: A, value: "1"}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: op, namespace: bundle}
spec:
  replicas: 1
  selector: {matchLabels: {app: op}}
  template:
    metadata: {labels: {app: op}}
    spec:
      serviceAccountName: op
      containers:
      - {name: op, image: example.invalid/op:1}
---
apiVersion: example.gpuop.dev/v1
kind: Widget
metadata: {name: w1, namespace: bundle}
spec: {size: 3}
"""


class Kubectl:
    def __init__(self, kubeconfig: Path, cache: Path) -> None:
        self.base = [str(find_binary("kubectl")), "--kubeconfig", str(kubeconfig), "--cache-dir", str(cache)]

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([*self.base, *args], capture_output=True, text=True, timeout=60, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [*self.base, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


@pytest.fixture
def kubectl(sim_apiserver: SimApiServer, tmp_path: Path) -> Iterator[Kubectl]:
    kubeconfig = sim_apiserver.write_kubeconfig(tmp_path / "kubeconfig")
    yield Kubectl(kubeconfig, tmp_path / "cache")


def test_get_nodes_and_namespaces(kubectl: Kubectl, sim_apiserver: SimApiServer) -> None:
    out = kubectl("get", "namespaces").stdout
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= {
        line.split()[0] for line in out.splitlines()[1:]
    }
    assert "No resources found" in kubectl("get", "nodes").stderr


def test_apply_bundle_then_reapply_label_and_watch(kubectl: Kubectl, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.yaml"
    bundle.write_text(BUNDLE.replace("VALUE", "1"))
    first = kubectl("apply", "--validate=false", "-f", str(bundle), check=False)
    # As on a real cluster, kubectl maps kinds from discovery read before the CRD existed.
    assert "customresourcedefinition.apiextensions.k8s.io/widgets.example.gpuop.dev created" in first.stdout
    for kind in (
        "namespace/bundle",
        "serviceaccount/op",
        "clusterrole.rbac.authorization.k8s.io/op",
        "daemonset.apps/dp",
        "deployment.apps/op",
    ):
        assert f"{kind} created" in first.stdout
    second = kubectl("apply", "--validate=false", "-f", str(bundle))
    assert "widget.example.gpuop.dev/w1 created" in second.stdout
    assert "daemonset.apps/dp unchanged" in second.stdout and "configmap/op-config unchanged" in second.stdout
    bundle.write_text(BUNDLE.replace("VALUE", "2").replace("size: 3", "size: 4"))
    third = kubectl("apply", "--validate=false", "-f", str(bundle))
    assert (
        "configmap/op-config configured" in third.stdout
        and "widget.example.gpuop.dev/w1 configured" in third.stdout
    )
    assert "deployment.apps/op unchanged" in third.stdout
    assert kubectl("get", "widget", "w1", "-n", "bundle", "-o", "jsonpath={.spec.size}").stdout == "4"
    env = kubectl(
        "get", "ds", "dp", "-n", "bundle", "-o", "jsonpath={.spec.template.spec.containers[0].env[0].value}"
    )
    assert env.stdout == "1"

    watcher = kubectl.popen(
        "get",
        "configmap",
        "op-config",
        "-n",
        "bundle",
        "-w",
        "-o",
        "jsonpath={.metadata.labels.stage}{'\\n'}",
    )
    try:
        time.sleep(0.5)  # kubectl must have opened its watch before the change; nothing to poll on its side
        kubectl("label", "configmap", "op-config", "-n", "bundle", "stage=ready")
        deadline = time.monotonic() + 20
        seen = ""
        assert watcher.stdout is not None
        while time.monotonic() < deadline and "ready" not in seen:
            seen += watcher.stdout.readline()
        assert "ready" in seen
    finally:
        watcher.kill()
        watcher.wait()
    assert (
        kubectl("get", "cm", "op-config", "-n", "bundle", "-o", "jsonpath={.metadata.labels.stage}").stdout
        == "ready"
    )


def test_label_cordon_and_server_side_apply(
    kubectl: Kubectl, sim_apiserver: SimApiServer, tmp_path: Path
) -> None:
    node = tmp_path / "node.yaml"
    node.write_text("apiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-1\n")
    assert (
        "node/gpu-1 serverside-applied"
        in kubectl("apply", "--server-side", "--validate=false", "-f", str(node)).stdout
    )
    kubectl("label", "node", "gpu-1", "amd.com/gpu.present=true")
    kubectl("cordon", "gpu-1")
    out = kubectl(
        "get", "nodes", "-l", "amd.com/gpu.present=true", "-o", "jsonpath={.items[*].spec.unschedulable}"
    )
    assert out.stdout == "true"
    assert sim_apiserver.stats().get(("patch", "nodes"), 0) >= 3
    header, row = kubectl("get", "nodes").stdout.splitlines()
    assert header.split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert row.split()[:3] == ["gpu-1", "Unknown,SchedulingDisabled", "<none>"]
