"""Vendor recipes run in the vendor's tools image: a Pod pinned to the node, read through pods/log.

One simulated cluster (an AMD and an NVIDIA node, pods as real processes) whose kubelets map a mirror's
copy of each tools image to `gpuop_sim.toolsimage` (RVS and `dcgmi diag -j` output in the formats the
vendors document) and answer `ErrImagePull` for any other image, as a node without registry access
does. The executor runs in the test process against the cluster's API server.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.config.testrunner import ToolsImages
from gpuop_common.kube import make_api_client
from gpuop_common.kubejson import NAMESPACES, NODES, PODS, KubeJson
from gpuop_common.shutdown import Stopping
from gpuop_sim.cluster import SimCluster, SimNode
from gpuop_sim.toolsimage import FAIL_FILE
from gpuop_test_runner.executor import RunRequest, TestExecutor
from gpuop_test_runner.logstore import RunLogStore
from gpuop_test_runner.metrics import TestRunnerMetrics
from gpuop_test_runner.recipes import Recipe, RecipeBook
from gpuop_test_runner.report import Reporter
from gpuop_test_runner.results import RESULT_LABEL, RunResult
from gpuop_test_runner.toolpod import NODE_LABEL, PodSite, PodTools, pod_manifest, pod_verdict, tools_for

pytestmark = pytest.mark.slow
NAMESPACE = "gpu-operator"
AMD_MIRROR = "mirror.example:5000/rocm/test-runner:v1.4.1"
NVIDIA_MIRROR = "mirror.example:5000/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"
MIRRORS = ToolsImages(amd=AMD_MIRROR, nvidia=NVIDIA_MIRROR)
HANGING = "mirror.example:5000/rocm/test-runner:hangs"  # a tool that never ends


@pytest.fixture(scope="module")
def sim() -> Iterator[SimCluster]:
    fake = [sys.executable, "-m", "gpuop_sim.toolsimage"]
    commands = {
        AMD_MIRROR: [*fake, "amd"],
        NVIDIA_MIRROR: [*fake, "nvidia"],
        HANGING: [sys.executable, "-c", "import time; print('rvs: starting', flush=True); time.sleep(600)"],
    }
    profiles = ["amd-single", "nvidia-h100x8"]
    with SimCluster(profiles=profiles, pods="process", image_commands=commands, device_plugins=False) as sim_:
        sim_.api().create(NAMESPACES, {"metadata": {"name": NAMESPACE}})
        yield sim_


def node_of(sim: SimCluster, vendor: str) -> SimNode:
    return next(n for n in sim.nodes if n.vendor == vendor)


def run_on(
    sim: SimCluster,
    node: SimNode,
    recipe: str | Recipe,
    images: ToolsImages,
    *,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> RunResult:
    for key, value in node.env.items():  # the node's NVML, as its agent would see it
        monkeypatch.setenv(key, value)
    api = make_api_client(sim.kubeconfig)
    site = PodSite(KubeJson(api), node.name, NAMESPACE)
    executor = TestExecutor(
        host_root=node.root,
        store=RunLogStore(tmp_path / "logs", keep=20),
        reporter=Reporter(api, node.name, TestRunnerMetrics()),
        stopping=Stopping(),
        tool_path="/nonexistent",  # nothing local: the tool can only come from the image
        vendor=node.vendor,
        tools_for=lambda r: tools_for(r, images, local_path="/nonexistent", site=site),
    )
    chosen = recipe if isinstance(recipe, Recipe) else RecipeBook().get(recipe)
    return executor.run(RunRequest(recipe=chosen, trigger="MANUAL"))


@contextmanager
def failing(node: SimNode, gpu: str) -> Iterator[None]:
    """The node's fake tools report `gpu` failed while inside."""
    fail = node.root / FAIL_FILE
    fail.parent.mkdir(parents=True, exist_ok=True)
    fail.write_text(f"{gpu}\n")
    try:
        yield
    finally:
        fail.unlink()


def tools_pods(sim: SimCluster, node: SimNode) -> list[dict[str, Any]]:
    pods, _ = sim.api().list(PODS, NAMESPACE, labelSelector=f"{NODE_LABEL}={node.name}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def labels(sim: SimCluster, node: SimNode) -> dict[str, str]:
    return dict(sim.api().get(NODES, node.name)["metadata"]["labels"])


def test_rvs_runs_in_the_amd_tools_image_and_judges_each_gpu(
    sim: SimCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = node_of(sim, "amd")
    passed = run_on(sim, node, "gst_single", MIRRORS, tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert (passed.result, passed.reason) == ("Passed", ""), passed.message
    assert [g.result for g in passed.gpus] == ["passed"]
    log = next((tmp_path / "logs").glob("*.log")).read_text()
    assert f"runs it in {AMD_MIRROR} (testRunner.toolsImage.amd)" in log
    assert " gst 13261 Gflop: " in log and "pass: TRUE" in log  # the tool's own lines, via pods/log
    assert labels(sim, node)[RESULT_LABEL] == "passed"

    with failing(node, "13261"):  # RVS names the GPU by its KFD gpu_id
        failed = run_on(sim, node, "gst_single", MIRRORS, tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert (failed.result, failed.reason) == ("Failed", "GpuFailed")
    assert [(g.index, g.result) for g in failed.gpus] == [(0, "failed")]
    assert labels(sim, node)[RESULT_LABEL] == "failed"
    sim.wait_for(lambda: not tools_pods(sim, node), timeout=60, what="tools pods deleted")


def test_dcgmi_runs_in_the_nvidia_tools_image_with_the_target_indices(
    sim: SimCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = node_of(sim, "nvidia")
    with failing(node, "5"):  # dcgmi names the GPU by its NVML index
        result = run_on(sim, node, "dcgm-level-1", MIRRORS, tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert (result.result, result.reason) == ("Failed", "GpuFailed")
    assert {g.index: g.result for g in result.gpus} == {
        i: ("failed" if i == 5 else "passed") for i in range(8)
    }
    assert "memtest on GPU 5" in next(g.detail for g in result.gpus if g.index == 5)


def test_a_tools_image_the_node_cannot_pull_is_tool_missing_naming_the_setting(
    sim: SimCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shipped default, on a node that cannot reach docker.io (no mirror configured)."""
    node = node_of(sim, "amd")
    before = labels(sim, node).get(RESULT_LABEL)
    result = run_on(sim, node, "gst_single", ToolsImages(), tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert (result.result, result.reason) == ("ToolMissing", "ToolMissing")
    assert "from the tools image docker.io/rocm/test-runner:v1.4.1" in result.message
    assert "ErrImagePull" in result.message
    assert "set testRunner.toolsImage.amd to an image with rvs" in result.message
    assert labels(sim, node).get(RESULT_LABEL) == before  # a missing tool says nothing about the GPUs
    sim.wait_for(lambda: not tools_pods(sim, node), timeout=60, what="tools pod deleted")


def test_a_tool_past_the_timeout_is_timed_out_and_its_pod_deleted(
    sim: SimCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = node_of(sim, "amd")
    quick = RecipeBook().get("gst_single").model_copy(update={"timeout_seconds": 2})
    images = ToolsImages(amd=HANGING)
    result = run_on(sim, node, quick, images, tmp_path=tmp_path, monkeypatch=monkeypatch)
    assert (result.result, result.reason) == ("TimedOut", "TimedOut")
    sim.wait_for(lambda: not tools_pods(sim, node), timeout=60, what="the hanging tools pod deleted")


def test_an_agent_deletes_the_tools_pods_a_killed_agent_left(sim: SimCluster) -> None:
    node = node_of(sim, "amd")
    # Earlier tests' pods may still be terminating (a kubelet takes the grace period): gone first,
    # so the only pod left is this test's.
    sim.wait_for(
        lambda: not sim.api().list(PODS, NAMESPACE, labelSelector=f"{NODE_LABEL}={node.name}")[0],
        timeout=60,
        what="earlier tools pods gone",
    )
    kube = KubeJson(make_api_client(sim.kubeconfig))
    left = pod_manifest(name="gpuop-tools-left", node=node.name, image=HANGING, argv=["rvs"], run_id="x")
    kube.create(PODS, left, NAMESPACE)
    tools = PodTools(kube, node=node.name, namespace=NAMESPACE, image="", setting="")
    assert tools.remove_leftovers() == ["gpuop-tools-left"]
    sim.wait_for(lambda: not tools_pods(sim, node), timeout=60, what="the leftover tools pod deleted")


def test_pod_verdicts_follow_the_kubelets_container_states() -> None:
    def pod(state: dict[str, Any], phase: str = "Pending") -> dict[str, Any]:
        return {"status": {"phase": phase, "containerStatuses": [{"name": "tools", "state": state}]}}

    assert pod_verdict({"status": {"phase": "Pending"}}).state == "running"
    assert pod_verdict(pod({"waiting": {"reason": "ContainerCreating"}})).state == "running"
    for reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "RunContainerError"):
        verdict = pod_verdict(pod({"waiting": {"reason": reason, "message": "why"}}))
        assert (verdict.state, verdict.detail) == ("missing", f"{reason}: why")
    started = pod_verdict(pod({"terminated": {"reason": "StartError", "exitCode": 128}}, "Failed"))
    assert started.state == "missing"
    done = pod_verdict(pod({"terminated": {"reason": "Error", "exitCode": 3}}, "Failed"))
    assert (done.state, done.exit_code) == ("terminated", 3)


def test_the_tools_pod_is_pinned_privileged_and_pulls_with_the_charts_secrets() -> None:
    pod = pod_manifest(
        name="gpuop-tools-gpu-1-ab12cd34",
        node="gpu-1",
        image=AMD_MIRROR,
        argv=["rvs", "-c", "/opt/rocm/share/rocm-validation-suite/conf/gst_single.conf"],
        run_id="ab12cd34",
        runtime_class="nvidia",
        pull_secrets=["mirror"],
    )
    spec = pod["spec"]
    assert (spec["nodeName"], spec["restartPolicy"], spec["runtimeClassName"]) == ("gpu-1", "Never", "nvidia")
    assert spec["imagePullSecrets"] == [{"name": "mirror"}]
    assert spec["tolerations"] == [{"operator": "Exists"}]  # a tainted node under remediation too
    (container,) = spec["containers"]
    assert container["command"][0] == "rvs" and container["image"] == AMD_MIRROR
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0}
    assert pod["metadata"]["labels"][NODE_LABEL] == "gpu-1"
    plain = pod_manifest(name="p", node="n", image="i", argv=["x"], run_id="r")
    assert "imagePullSecrets" not in plain["spec"]
