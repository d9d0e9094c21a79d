"""Runs against fake rvs / agfhc / dcgmi on PATH and the simulated API server: for each way a tool
can end (pass, one GPU failing, hang, garbage, missing) the Node gets the right Event and label, the
run its log file and status, and the metrics count it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any

import pytest
from gpuop_common.gpu.amd_topology import read_topology
from gpuop_test_runner.executor import RunRequest
from gpuop_test_runner.gpus import targets_for
from gpuop_test_runner.recipes import Recipe, RecipeBook
from gpuop_test_runner.results import RESULT_LABEL, RESULT_TIME_ANNOTATION

# Fixture types live in conftest.py (not importable in importlib mode): named here for reading.
Cluster = FakeTools = GpuNode = Runner = Any
MakeRunner = Callable[..., Any]


def rvs_output(node: GpuNode, failing: int | None = None) -> str:
    """RVS gst lines for every KFD node (partition) of every GPU; one partition of `failing` fails."""
    lines = ["[INFO  ] rvs: action gst-1 starting"]
    for target in node.targets:
        for n, kfd in enumerate(target.kfd_gpu_ids):
            met = "FALSE" if target.index == failing and n == len(target.kfd_gpu_ids) - 1 else "TRUE"
            lines.append(
                f"[RESULT] [1046.36] [gst-1] gst gpu_id: {kfd} GFLOPS 101234.5 Target: 9e4 met: {met}"
            )
    return "\n".join(lines) + "\n"


def dcgm_output(node: GpuNode, failing: int | None = None) -> str:
    results = [
        {"entity_group": "GPU", "entity_id": t.index, "status": "Fail" if t.index == failing else "Pass"}
        for t in node.targets
    ]
    tests = [{"name": "software", "results": [{"status": "Pass"}]}, {"name": "memory", "results": results}]
    return json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": tests}]}})


@pytest.fixture
def amd(gpu_node: Callable[[str], GpuNode], cluster: Cluster) -> GpuNode:
    """MI300X in CPX (8 KFD nodes per GPU). The capture lacks the KFD `gpu_id` files a live node has
    (RVS names GPUs by them), so they are written into this temp copy."""
    cluster.create_node({"team": "ml"})
    node = gpu_node("amd-mi300x-cpx")
    for kfd in read_topology(node.root):
        if kfd.is_gpu:
            (kfd.path / "gpu_id").write_text(f"{41000 + kfd.index}\n")
    return dataclasses.replace(node, targets=targets_for(node.root, node.devices))


def run(runner: Runner, recipe: str | Recipe, **kwargs: Any) -> Any:
    chosen = recipe if isinstance(recipe, Recipe) else RecipeBook().get(recipe)
    return runner.executor.run(RunRequest(recipe=chosen, trigger="MANUAL", **kwargs))


def test_rvs_pass(
    amd: GpuNode, tools: FakeTools, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any
) -> None:
    tools.prints("rvs", rvs_output(amd))
    runner = make_runner(amd, kube_api_client)
    result = run(runner, "gst_single")
    assert (result.result, result.reason) == ("Passed", "")
    assert [g.result for g in result.gpus] == ["passed"] * 8
    assert cluster.events() == [("TestPassed", "Normal", "gst_single (RVS, MANUAL): Passed; 8/8 GPUs passed")]
    assert cluster.labels() == {"team": "ml", RESULT_LABEL: "passed"}
    assert cluster.annotations()[RESULT_TIME_ANNOTATION].endswith("Z")
    assert "gst gpu_id" in runner.last_log() and "rvs -c /opt/rocm/share" in runner.last_log()
    assert runner.results() == [result]
    registry = runner.metrics.registry
    assert (
        registry.get_sample_value("gpuop_test_runs_total", {"recipe": "gst_single", "result": "Passed"}) == 1
    )
    assert registry.get_sample_value("gpuop_test_run_duration_seconds_count", {"recipe": "gst_single"}) == 1
    labels = {"gpu": amd.targets[3].id, "gpu_index": "3", "recipe": "gst_single"}
    assert registry.get_sample_value("gpuop_test_last_result", labels) == 1


def test_rvs_one_gpu_fails(
    amd: GpuNode, tools: FakeTools, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any
) -> None:
    tools.prints("rvs", rvs_output(amd, failing=7))
    runner = make_runner(amd, kube_api_client)
    result = run(runner, "gst_single")
    assert (result.result, result.reason) == ("Failed", "GpuFailed")
    assert [g.index for g in result.gpus if g.result == "failed"] == [7]
    ((reason, type_, message),) = cluster.events()
    assert (reason, type_) == ("TestFailed", "Warning")
    assert "7/8 GPUs passed, failed GPU index 7" in message
    assert cluster.labels()[RESULT_LABEL] == "failed"
    labels = {"gpu": amd.targets[7].id, "gpu_index": "7", "recipe": "gst_single"}
    assert runner.metrics.registry.get_sample_value("gpuop_test_last_result", labels) == 0


def test_hang_past_the_timeout_kills_the_process_group(
    amd: GpuNode,
    tools: FakeTools,
    make_runner: MakeRunner,
    cluster: Cluster,
    kube_api_client: Any,
    *,
    wait: Any,
) -> None:
    tools.hangs("rvs")
    recipe = Recipe(name="quick", framework="RVS", command=["rvs", "-c", "x.conf"], timeout_seconds=2)
    runner = make_runner(amd, kube_api_client)
    result = run(runner, recipe)
    assert (result.result, result.reason) == ("TimedOut", "TimedOut")
    assert result.output_head == ["starting rvs"]
    assert cluster.reasons() == ["TestTimedOut"]
    assert cluster.labels()[RESULT_LABEL] == "failed"
    assert len(tools.pids("rvs")) == 2
    wait(lambda: tools.all_gone("rvs"), "the tool and its worker to be gone")
    assert "starting rvs" in runner.last_log()


def test_garbage_output_is_a_failed_run_keeping_the_first_lines(
    amd: GpuNode, tools: FakeTools, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any
) -> None:
    tools.prints("rvs", "".join(f"noise line {i}\n" for i in range(50)))
    result = run(make_runner(amd, kube_api_client), "gst_single")
    assert (result.result, result.reason) == ("Failed", "UnparsableOutput")
    assert result.output_head == [f"noise line {i}" for i in range(20)]
    assert cluster.reasons() == ["TestFailed"]
    assert "UnparsableOutput" in cluster.events()[0][2]
    assert cluster.labels()[RESULT_LABEL] == "failed"


def test_missing_tool_names_the_executable_and_leaves_the_label(
    amd: GpuNode, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any
) -> None:
    runner = make_runner(amd, kube_api_client)
    result = run(runner, "all_lvl1")
    assert (result.result, result.reason) == ("ToolMissing", "ToolMissing")
    ((reason, type_, message),) = cluster.events()
    assert (reason, type_) == ("ToolMissing", "Warning")
    assert "executable 'agfhc' not found" in message
    assert RESULT_LABEL not in cluster.labels()
    assert len(runner.logs()) == 1


def test_passing_lines_with_a_failing_exit_code_fail(
    amd: GpuNode, tools: FakeTools, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any
) -> None:
    tools.prints("rvs", rvs_output(amd), exit_code=3)
    result = run(make_runner(amd, kube_api_client), "gst_single")
    assert (result.result, result.reason, result.message) == ("Failed", "ExitCode", "rvs exited with 3")
    assert cluster.labels()[RESULT_LABEL] == "failed"


def test_agfhc_pass_and_one_gpu_failing(
    amd: GpuNode, tools: FakeTools, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any
) -> None:
    runner = make_runner(amd, kube_api_client)
    lines = [f"hbm_bw GPU{t.index} PASS" for t in amd.targets]
    tools.prints("agfhc", "\n".join(lines) + "\n")
    assert run(runner, "all_lvl1").result == "Passed"
    lines[2] = "hbm_bw GPU2 FAIL"
    tools.prints("agfhc", "\n".join(lines) + "\n")
    result = run(runner, "all_lvl1")
    assert [g.index for g in result.gpus if g.result == "failed"] == [2]
    assert sorted(cluster.reasons()) == ["TestFailed", "TestPassed"]  # same second: order unknown
    assert cluster.labels()[RESULT_LABEL] == "failed"
    assert len(runner.logs()) == 2


def test_dcgm_on_nvidia_gets_the_target_indices_and_fails_one_gpu(
    gpu_node: Callable[[str], GpuNode],
    tools: FakeTools,
    make_runner: MakeRunner,
    cluster: Cluster,
    kube_api_client: Any,
) -> None:
    cluster.create_node()
    node = gpu_node("nvidia-h100x8")
    args = tools.bin / "dcgmi.args"
    (tools.bin / "dcgmi.out").write_text(dcgm_output(node, failing=5))
    tools.write("dcgmi", f'echo "$@" > "{args}"\ncat "{tools.bin / "dcgmi.out"}"\n')
    runner = make_runner(node, kube_api_client)
    result = run(runner, "dcgm-level-1")
    assert args.read_text().strip() == "diag -r 1 -j -i 0,1,2,3,4,5,6,7"
    assert [g.index for g in result.gpus if g.result == "failed"] == [5]
    assert cluster.reasons() == ["TestFailed"]
    (tools.bin / "dcgmi.out").write_text(dcgm_output(node))
    assert run(runner, "dcgm-level-1").result == "Passed"
    assert cluster.labels()[RESULT_LABEL] == "passed"


def test_iterations_stop_on_failure_and_per_gpu_scope(
    amd: GpuNode, tools: FakeTools, make_runner: MakeRunner, kube_api_client: Any
) -> None:
    calls = tools.bin / "calls"
    # A per-GPU tool: GPU 1 fails, the others pass; every call is recorded.
    tools.write(
        "agfhc",
        f'echo "$1" >> "{calls}"\nif [ "$1" = 1 ]; then echo "t GPU$1 FAIL"; else echo "t GPU$1 PASS"; fi\n',
    )
    recipe = Recipe(
        name="per", framework="AGFHC", command=["agfhc", "{gpu_index}"], scope="per-gpu", iterations=3
    )
    result = run(make_runner(amd, kube_api_client), recipe)
    assert calls.read_text().split() == [str(i) for i in range(8)]  # one iteration: it failed
    assert (result.result, result.iterations) == ("Failed", 1)
    calls.unlink()
    again = run(make_runner(amd, kube_api_client), recipe.model_copy(update={"stop_on_failure": False}))
    assert calls.read_text().split() == [str(i) for i in range(8)] * 3
    assert again.iterations == 3


def test_retention_keeps_the_newest_runs(amd: GpuNode, make_runner: MakeRunner, kube_api_client: Any) -> None:
    runner = make_runner(amd, kube_api_client, keep=3)
    results = [run(runner, "gpuop-selfcheck") for _ in range(5)]
    assert len(runner.logs()) == 3
    assert [r.run_id for r in runner.results()] == [r.run_id for r in results[2:]]


def test_a_vendor_recipe_tests_only_that_vendors_gpus(
    amd: GpuNode, tools: FakeTools, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any
) -> None:
    tools.prints("dcgmi", dcgm_output(amd))
    result = run(make_runner(amd, kube_api_client), "dcgm-level-1")
    assert (result.result, result.reason, result.message) == (
        "Failed",
        "NoGpus",
        "no nvidia GPU to test on this node",
    )
    assert not (tools.bin / "dcgmi.args").exists()
    assert cluster.reasons() == ["TestFailed"]
