"""The demo: `--duration` + `--no-live` make it a plain program whose output a test can read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from gpuop_sim.cluster import SimNode
from gpuop_sim.demo import NodeRow, node_rows, stage_of


@pytest.mark.slow
def test_demo_prints_kubeconfig_kubectl_command_and_every_node(tmp_path: Path) -> None:
    env = dict(os.environ, COLUMNS="220")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuop_sim.demo",
            "--amd-nodes",
            "2",
            "--nvidia-nodes",
            "1",
            "--pods",
            "stub",
            "--duration",
            "2",
            "--no-live",
            "--chart",
            str(tmp_path / "no-chart"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "kubeconfig: /" in out
    assert "get nodes -L gpuop.dev/sim-profile" in out
    assert "--kubeconfig" in out
    assert "No operator chart" in out
    for node in ("amd-0", "amd-1", "nvidia-0"):
        assert node in out
    assert "Ready" in out
    assert "Stopping the simulated cluster" in out


def test_rows_show_stage_pods_resources_and_metrics_urls() -> None:
    sim = [SimNode("amd-0", "amd-mi210x8", "amd", 8, Path("/r"), "127.10.0.1")]
    node = {
        "metadata": {
            "name": "amd-0",
            "labels": {"gpuop.dev/sim-profile": "amd-mi210x8", "gpuop.dev/deploy.device-plugin": "true"},
            "annotations": {"gpuop.dev/stage": "operands-rolling", "other.io/x": "y"},
        },
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "allocatable": {"cpu": "64", "amd.com/gpu": "8"},
        },
    }
    pod = {
        "metadata": {
            "name": "gpuop-metrics-exporter-x1",
            "namespace": "gpu-operator",
            "labels": {"app.kubernetes.io/name": "metrics-exporter"},
        },
        "spec": {
            "nodeName": "amd-0",
            "containers": [{"ports": [{"name": "metrics", "containerPort": 5000}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": "127.10.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    (row,) = node_rows(sim, [node], [pod])
    assert row == NodeRow(
        node="amd-0",
        vendor="amd",
        gpus="amd-mi210x8 x8",
        ready="Ready",
        stage="stage=operands-rolling; deploy: device-plugin",
        pods="1/1 ready: metrics-exporter",
        resources="amd.com/gpu=8",
        metrics="http://127.10.0.1:5000/metrics",
    )


def test_stage_of_a_fresh_node_is_a_dash() -> None:
    assert stage_of({"metadata": {"name": "n"}}) == "-"


CHART_YAML = "apiVersion: v2\nname: gpu-operator\nversion: 0.1.0\n"
DAEMONSET_YAML = """\
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: demo-agent
  namespace: {{ .Release.Namespace }}
spec:
  selector:
    matchLabels: {app: demo-agent}
  template:
    metadata:
      labels: {app: demo-agent}
    spec:
      nodeSelector:
        feature.node.kubernetes.io/pci-1002.present: "true"
      containers:
      - name: agent
        image: test/agent:1
        ports:
        - {name: metrics, containerPort: 9400}
"""


@pytest.mark.slow
def test_demo_installs_an_operator_chart_with_helm_and_kubectl(tmp_path: Path) -> None:
    chart = tmp_path / "gpu-operator"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(CHART_YAML)
    (chart / "templates" / "daemonset.yaml").write_text(DAEMONSET_YAML)
    env = dict(os.environ, COLUMNS="220")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuop_sim.demo",
            "--amd-nodes",
            "1",
            "--nvidia-nodes",
            "1",
            "--pods",
            "stub",
            "--duration",
            "4",
            "--no-live",
            "--refresh",
            "0.5",
            "--chart",
            str(chart),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Installed gpu-operator into namespace gpu-operator (helm release gpuop)" in done.stdout
    assert "uninstall gpuop" in done.stdout and "rollback gpuop 1" in done.stdout
    # The AMD node's agent pod shows up with its metrics URL; the NVIDIA node has none.
    assert "http://127.10.0.1:9400/metrics" in done.stdout
    assert "127.10.0.2:9400" not in done.stdout
