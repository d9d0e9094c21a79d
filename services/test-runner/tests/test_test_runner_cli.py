"""The real command line: `check` exit codes for init containers, and the agent stopped by SIGTERM
mid-run (the tool's process group goes, the run is recorded and answered as Aborted)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes.faults import raise_ras
from gpuop_test_runner.results import REQUEST_ANNOTATION

# Fixture types live in conftest.py (not importable in importlib mode): named here for reading.
Cluster = FakeTools = GpuNode = Any

pytestmark = pytest.mark.slow


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpuop_test_runner.main", *args]


@pytest.fixture
def amd(gpu_node: Callable[[str], GpuNode]) -> GpuNode:
    return gpu_node("amd-mi300x-cpx")


@pytest.fixture
def env(amd: GpuNode, tools: FakeTools) -> dict[str, str]:
    return {**os.environ, **amd.info.env, "PATH": f"{tools.bin}:/usr/bin:/bin", "NODE_NAME": ""}


@contextmanager
def agent_process(argv: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    """The agent as a child process, killed on the way out if the test did not stop it."""
    agent = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield agent
    finally:
        if agent.poll() is None:
            agent.kill()


def terminate(agent: subprocess.Popen[str]) -> str:
    """SIGTERM, as the kubelet stops a pod; the agent's output once it has exited."""
    agent.send_signal(signal.SIGTERM)
    output, _ = agent.communicate(timeout=60)
    return output


def check(env: dict[str, str], root: Path, logs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = command("check", "--host-root", str(root), "--logs-dir", str(logs), *args)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_check_exit_codes(amd: GpuNode, tools: FakeTools, env: dict[str, str], tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    passed = check(env, amd.root, logs, "--recipe", "gpuop-selfcheck")
    assert passed.returncode == 0, passed.stderr
    assert "gpuop-selfcheck (selfcheck, PRE_START_JOB_CHECK): Passed; 8/8 GPUs passed" in passed.stdout

    tools.prints(
        "rvs",
        "[RESULT] [1.0] [gst-1] gst gpu_id: 0 met: TRUE\n[RESULT] [1.0] [gst-1] gst gpu_id: 1 met: FALSE\n",
    )
    failed = check(env, amd.root, logs, "--recipe", "gst_single")
    assert failed.returncode == 1, failed.stderr
    assert "GPU 1 " in failed.stdout and ": failed" in failed.stdout

    tools.prints("rvs", "Segmentation fault\n", exit_code=139)
    garbage = check(env, amd.root, logs, "--recipe", "gst_single")
    assert garbage.returncode == 1
    assert "[UnparsableOutput]" in garbage.stdout
    assert "    Segmentation fault" in garbage.stdout

    # The shipped defaults: AGFHC comes from the AMD tools image, which needs cluster access; the
    # message says which setting provides the tool (it named none before the tools images).
    missing = check(env, amd.root, logs, "--recipe", "all_lvl1")
    assert missing.returncode == 2
    assert "executable 'agfhc' not found" in missing.stdout
    assert "testRunner.toolsImage.amd (docker.io/rocm/test-runner:v1.4.1) runs only with cluster" in (
        missing.stdout
    )
    local = tmp_path / "local.yaml"
    local.write_text("toolsImage: {amd: ''}\n")
    empty = check(env, amd.root, logs, "--config-file", str(local), "--recipe", "all_lvl1")
    assert empty.returncode == 2
    assert "testRunner.toolsImage.amd is empty (tools from this host)" in empty.stdout

    unknown = check(env, amd.root, logs, "--recipe", "nope")
    assert unknown.returncode == 2
    assert "unknown recipe 'nope'" in unknown.stderr

    config = tmp_path / "config.yaml"
    config.write_text("recipes:\n- {name: x, framework: RVS}\n")
    bad = check(env, amd.root, logs, "--config-file", str(config))
    assert bad.returncode == 2
    assert f"config file {config}: recipes.0" in bad.stderr
    for image in ("Docker.io/ROCm/test runner:v1", "rocm/test-runner:v1 --privileged", "a/b@sha256:12"):
        config.write_text(json.dumps({"toolsImage": {"amd": image}}))
        malformed = check(env, amd.root, logs, "--config-file", str(config), "--recipe", "gst_single")
        assert malformed.returncode == 2
        assert f"config file {config}: toolsImage.amd: String should match pattern" in malformed.stderr
        assert repr(image) in malformed.stderr
    assert len(list(logs.glob("*.log"))) == 5  # usage errors start no run


def test_sigterm_mid_run_aborts_kills_the_tool_and_answers(
    amd: GpuNode,
    tools: FakeTools,
    env: dict[str, str],
    tmp_path: Path,
    cluster: Cluster,
    *,
    sim_kubeconfig: Path,
    wait: Any,
) -> None:
    cluster.create_node()
    tools.hangs("rvs")
    config = tmp_path / "config.yaml"
    config.write_text("trigger: MANUAL\n")
    logs = tmp_path / "logs"
    argv = command(
        "--node-name", "gpu-node", "--kubeconfig", str(sim_kubeconfig), "--host-root", str(amd.root),
        "--logs-dir", str(logs), "--config-file", str(config), "--interval", "0.2", "--probe-port", "0",
    )  # fmt: skip
    with agent_process(argv, env) as agent:
        cluster.annotate({REQUEST_ANNOTATION: "gst_single:stop-me"})
        wait(lambda: len(tools.pids("rvs")) == 2, "the tool to start")
        output = terminate(agent)
    assert agent.returncode == 0, output
    wait(lambda: tools.all_gone("rvs"), "the tool and its worker to be gone")
    assert cluster.reasons() == ["TestAborted"]
    assert cluster.answer()["requestId"] == "stop-me"
    assert cluster.answer()["result"] == "Aborted"
    assert REQUEST_ANNOTATION not in cluster.annotations()
    (status,) = logs.glob("*.json")
    assert json.loads(status.read_text())["result"]["result"] == "Aborted"
    assert "starting rvs" in next(logs.glob("*.log")).read_text()


def test_the_agent_leaves_an_unhealthy_gpu_a_pod_holds_alone(
    amd: GpuNode,
    env: dict[str, str],
    tmp_path: Path,
    cluster: Cluster,
    kubelet_emulator: KubeletEmulator,
    *,
    sim_kubeconfig: Path,
    wait: Any,
) -> None:
    # The real agent asks the kubelet (its pod-resources client is made on first use) before testing.
    cluster.create_node()
    gpu = amd.devices[1]
    kubelet_emulator.assign("trainer-0", "team-a", "main", "amd.com/gpu", [gpu.partitions[0].id])
    config = tmp_path / "config.yaml"
    config.write_text("trigger: AUTO_UNHEALTHY_GPU_WATCH\nrecipe: gpuop-selfcheck\npollIntervalSeconds: 5\n")
    argv = command(
        "--node-name", "gpu-node", "--kubeconfig", str(sim_kubeconfig), "--host-root", str(amd.root),
        "--logs-dir", str(tmp_path / "logs"), "--config-file", str(config), "--interval", "0.2",
        "--probe-port", "0", "--pod-resources-socket", str(kubelet_emulator.pod_resources_socket),
    )  # fmt: skip
    with agent_process(argv, env) as agent:
        # A tick answers the request, then reads health: the second answer means the baseline is read.
        for n in (1, 2):
            cluster.annotate({REQUEST_ANNOTATION: f"nope:sync-{n}"})
            wait(lambda n=n: cluster.reasons().count("TestConfigError") == n, f"request {n} answered")
        raise_ras(amd.root, gpu.pci_address)
        wait(lambda: "TestDeferred" in cluster.reasons(), "the test to be deferred")
        output = terminate(agent)
    assert agent.returncode == 0, output
    deferred = [m for reason, _type, m in cluster.events() if reason == "TestDeferred"]
    assert deferred == [
        f"GPU {gpu.id} turned unhealthy; testing it waits until it is free (held by team-a/trainer-0/main)"
    ]
    assert "TestFailed" not in cluster.reasons() and "TestPassed" not in cluster.reasons()


def test_the_agent_loads_grpc_only_when_it_asks_the_kubelet() -> None:
    # An idle agent never asks who holds a GPU; gRPC and the pod-resources protos are ~15 MiB of it.
    code = "import sys, gpuop_test_runner.main; print(sorted(m for m in sys.modules if m.startswith('grpc')))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_default_pod_resources_socket_is_the_kubelets() -> None:
    from gpuop_common.kubelet import podresources
    from gpuop_test_runner import settings

    assert settings.POD_RESOURCES_SOCKET == podresources.POD_RESOURCES_SOCKET
    assert settings.TestRunnerSettings().pod_resources_socket == Path(podresources.POD_RESOURCES_SOCKET)
