"""`gpuop-sim join` as a new user runs it: simulated GPU nodes joined to a cluster they did not start.

The cluster here is `gpuop-sim serve` with no nodes of its own (the simulated control plane alone),
reached only through its kubeconfig, as a real kube-apiserver/controller-manager/scheduler would be.
The umbrella chart installed with the real helm reaches DeviceConfig Ready on the joined nodes with
allocatable GPUs; stopping join removes its Nodes; a SIGKILLed join leaves Nodes whose heartbeats
stop and that the node lifecycle controller marks Unknown and unreachable.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from gpuop_sim import helm
from gpuop_sim.shortpaths import short_tmp_dir
from gpuop_sim.waiting import wait_until
from gpuop_sim.workloads.kubeapi import NODES, KubeRest, Resource, is_status

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
UMBRELLA = ROOT / "charts" / "gpu-operator"
NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
GPU_RESOURCE = {"amd-0": "amd.com/gpu", "nvidia-0": "nvidia.com/gpu"}
UNREACHABLE = "node.kubernetes.io/unreachable"


class Running:
    """A `gpuop-sim` command that prints its JSON ready line, then runs until signalled."""

    def __init__(self, *args: str) -> None:
        command = [_gpuop_sim(), *args]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"gpuop-sim {args[0]} exited with {self.process.wait()} before it was ready"
        self.ready: dict[str, Any] = json.loads(line)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(timeout=60)


def _gpuop_sim() -> str:
    return str(Path(sys.executable).parent / "gpuop-sim")


@pytest.fixture
def state_dir() -> Iterator[Path]:
    """A join's state dir: short (unix socket paths) and open to containers' users, as a node's."""
    path = short_tmp_dir("gj-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def control_plane() -> Iterator[Running]:
    helm.dependency_build(UMBRELLA)
    home = short_tmp_dir("gc-")
    kubeconfig = home / "kubeconfig"
    # A shorter grace period than the default 50 s (kube-controller-manager's flag) so the killed
    # join's nodes go Unknown sooner; still over two 10 s Lease renewals, or live nodes would flap.
    serve = Running(
        "serve", "--amd-nodes", "0", "--nvidia-nodes", "0", "--kubeconfig", str(kubeconfig),
        "--node-monitor-grace-period", "25",
    )  # fmt: skip
    assert serve.ready["nodes"] == {}
    yield serve
    serve.stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def api(control_plane: Running) -> Iterator[KubeRest]:
    rest = KubeRest.from_kubeconfig(control_plane.ready["kubeconfig"])
    yield rest
    rest.close()


def deviceconfigs_ready(api: KubeRest) -> bool:
    dcs, _ = api.list(DEVICECONFIGS, NAMESPACE)
    return len(dcs) == 2 and all(
        any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (dc.get("status") or {}).get("conditions", [])
        )
        for dc in dcs
    )


def gpus(api: KubeRest, node: str, resource: str) -> int:
    return int(api.get(NODES, node)["status"].get("allocatable", {}).get(resource, "0"))


def node_gone(api: KubeRest, name: str) -> bool:
    try:
        api.get(NODES, name)
    except Exception as error:
        return is_status(error, 404)
    return False


def test_the_chart_runs_on_joined_nodes_and_stopping_join_removes_them(
    control_plane: Running, api: KubeRest, state_dir: Path
) -> None:
    kubeconfig = control_plane.ready["kubeconfig"]
    joined = Running(
        "join", "--kubeconfig", kubeconfig, "--amd-nodes", "1", "--nvidia-nodes", "1", "--cpu-nodes", "1",
        "--state-dir", str(state_dir),
    )  # fmt: skip
    try:
        assert sorted(joined.ready["nodes"]) == ["amd-0", "cpu-0", "nvidia-0"]
        helm.install(Path(kubeconfig), UMBRELLA, namespace=NAMESPACE, release="gpuop", wait=True)
        wait_until(lambda: deviceconfigs_ready(api), 240, what="both DeviceConfigs Ready")
        for node, resource in GPU_RESOURCE.items():
            allocatable = wait_until(lambda: gpus(api, node, resource), 60, what=f"{resource} on {node}")  # noqa: B023
            assert allocatable > 0
    finally:
        assert joined.stop() == 0
    for node in joined.ready["nodes"]:
        assert node_gone(api, node), f"node {node} outlived its join"


def test_a_killed_join_leaves_nodes_the_lifecycle_controller_marks_unknown(
    control_plane: Running, api: KubeRest, state_dir: Path
) -> None:
    joined = Running(
        "join", "--kubeconfig", control_plane.ready["kubeconfig"], "--cpu-nodes", "1", "--pods", "stub",
        "--name-prefix", "killed-", "--state-dir", str(state_dir),
    )  # fmt: skip
    node = "killed-cpu-0"
    wait_until(lambda: ready_status(api, node) == "True", 30, what=f"{node} Ready")
    joined.stop(signal.SIGKILL)
    wait_until(lambda: ready_status(api, node) == "Unknown", 90, what=f"{node} Unknown")
    taints = wait_until(
        lambda: unreachable_effects(api, node) == {"NoSchedule", "NoExecute"}, 30, what="unreachable taints"
    )
    assert taints
    # Joined again (a fresh state dir: node roots are laid once), the node side takes its Node over:
    # Ready, and the controller lifts the taints.
    fresh = short_tmp_dir("gj-")
    again = Running(
        "join", "--kubeconfig", control_plane.ready["kubeconfig"], "--cpu-nodes", "1", "--pods", "stub",
        "--name-prefix", "killed-", "--state-dir", str(fresh),
    )  # fmt: skip
    try:
        wait_until(lambda: ready_status(api, node) == "True", 30, what=f"{node} Ready again")
        wait_until(lambda: not unreachable_effects(api, node), 30, what="unreachable taints lifted")
    finally:
        assert again.stop() == 0
        shutil.rmtree(fresh, ignore_errors=True)
    assert node_gone(api, node)


def unreachable_effects(api: KubeRest, node: str) -> set[str]:
    return {t["effect"] for t in api.get(NODES, node)["spec"].get("taints") or [] if t["key"] == UNREACHABLE}


def ready_status(api: KubeRest, node: str) -> str:
    conditions = api.get(NODES, node)["status"].get("conditions") or []
    return next((str(c["status"]) for c in conditions if c["type"] == "Ready"), "")


def test_the_demo_runs_against_an_existing_cluster_through_join(
    control_plane: Running, api: KubeRest, state_dir: Path
) -> None:
    """`make demo DEMO_ARGS="--kubeconfig PATH"`: the demo's nodes join that cluster and leave it."""
    done = subprocess.run(
        [
            sys.executable, "-m", "gpuop_sim.demo", "--kubeconfig", control_plane.ready["kubeconfig"],
            "--amd-nodes", "1", "--nvidia-nodes", "0", "--pods", "stub", "--name-prefix", "demo-",
            "--state-dir", str(state_dir), "--duration", "2", "--no-live",
            "--chart", str(state_dir / "no-chart"),
        ],
        capture_output=True, text=True, timeout=180, env=dict(os.environ, COLUMNS="220"), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"joining the cluster of {control_plane.ready['kubeconfig']}" in done.stdout
    assert "demo-amd-0" in done.stdout
    assert node_gone(api, "demo-amd-0")
