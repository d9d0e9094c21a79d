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
        "metadata": {"name": "exporter", "namespace": "gpuop"},
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
        pods="1/1 ready: gpuop/exporter",
        resources="amd.com/gpu=8",
        metrics="http://127.10.0.1:5000/metrics",
    )


def test_stage_of_a_fresh_node_is_a_dash() -> None:
    assert stage_of({"metadata": {"name": "n"}}) == "-"
