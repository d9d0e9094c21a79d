"""The agent's triggers: request annotations answered and cleared, GPUs turning unhealthy tested once
per transition, runs sharing a GPU serialised, and runs a dead process left behind recorded Aborted."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from gpuop_common.config.testrunner import TestRunnerConfig
from gpuop_common.kubelet.assignments import PodRef
from gpuop_sim.nodes.faults import raise_ras, vanish_gpu
from gpuop_test_runner.agent import Holders, TestRunnerAgent
from gpuop_test_runner.executor import RunRequest
from gpuop_test_runner.recipes import Recipe, RecipeBook
from gpuop_test_runner.results import ANSWER_ANNOTATION, REQUEST_ANNOTATION, RESULT_LABEL
from gpuop_test_runner.triggers import held_gpus

# Fixture types live in conftest.py (not importable in importlib mode): named here for reading.
Cluster = FakeTools = GpuNode = Runner = Any
MakeRunner = Callable[..., Any]


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_agent(
    runner: Runner,
    api: Any,
    config: TestRunnerConfig,
    clock: Clock | None = None,
    holders: Holders = lambda: None,
) -> TestRunnerAgent:
    return TestRunnerAgent(
        executor=runner.executor,
        api=api,
        node_name="gpu-node",
        config=lambda: config,
        stopping=runner.stopping,
        clock=clock or Clock(),
        holders=holders,
    )


@pytest.fixture
def amd(gpu_node: Callable[[str], GpuNode], cluster: Cluster) -> GpuNode:
    cluster.create_node({"gpuop.dev/gpu.count": "8"})
    return gpu_node("amd-mi300x-cpx")


MANUAL_ONLY = TestRunnerConfig(trigger="MANUAL")


def test_request_is_answered_and_cleared(
    amd: GpuNode, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any, wait: Any
) -> None:
    agent = make_agent(make_runner(amd, kube_api_client, advertised=8), kube_api_client, MANUAL_ONLY)
    cluster.annotate({REQUEST_ANNOTATION: "gpuop-selfcheck:req-1"})
    assert [r.request_id for r in agent.tick()] == ["req-1"]
    wait(lambda: REQUEST_ANNOTATION not in cluster.annotations(), "the request to be cleared")
    answer = cluster.answer()
    assert {k: answer[k] for k in ("requestId", "recipe", "result", "reason")} == {
        "requestId": "req-1",
        "recipe": "gpuop-selfcheck",
        "result": "Passed",
        "reason": "",
    }
    assert [g["index"] for g in answer["gpus"]] == list(range(8))
    assert {g["result"] for g in answer["gpus"]} == {"passed"}
    assert (
        datetime.fromisoformat(answer["start"]) <= datetime.fromisoformat(answer["end"]) <= datetime.now(UTC)
    )
    assert cluster.reasons() == ["TestPassed"]
    assert cluster.labels()[RESULT_LABEL] == "passed"
    assert agent.tick() == []  # answered: nothing left to pick up


def test_bad_request_is_answered_without_a_verdict(
    amd: GpuNode, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any
) -> None:
    agent = make_agent(make_runner(amd, kube_api_client), kube_api_client, MANUAL_ONLY)
    for value in ("nope:req-2", "not a request!"):
        cluster.annotate({REQUEST_ANNOTATION: value})
        assert agent.tick() == []
        assert REQUEST_ANNOTATION not in cluster.annotations()
        assert cluster.answer()["result"] == "Failed"
        assert cluster.answer()["reason"] == "BadRequest"
    assert cluster.answer()["requestId"] is None
    assert cluster.reasons() == ["TestConfigError", "TestConfigError"]
    assert any("unknown recipe 'nope'" in message for _reason, _type, message in cluster.events())
    assert RESULT_LABEL not in cluster.labels()


def test_unhealthy_gpu_is_tested_once_per_transition(
    amd: GpuNode, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any, wait: Any
) -> None:
    clock = Clock()
    config = TestRunnerConfig(recipe="gpuop-selfcheck", poll_interval_seconds=30)
    runner = make_runner(amd, kube_api_client)
    agent = make_agent(runner, kube_api_client, config, clock)
    gpu = amd.devices[2]

    def tick() -> list[RunRequest]:
        clock.now += 30
        started = agent.tick()
        wait(lambda: not agent.busy(), "the runs to finish")
        return started

    assert tick() == []  # the first health read is the baseline
    gone = vanish_gpu(amd.root, gpu.pci_address)
    (started,) = tick()
    assert (started.trigger, started.gpu_ids) == ("AUTO_UNHEALTHY_GPU_WATCH", frozenset({gpu.id}))
    assert tick() == []  # still unhealthy: no new transition
    clock.now += 1  # not due yet: health is not even read
    assert agent.tick() == []
    gone.restore()
    assert tick() == []  # recovered
    vanish_gpu(amd.root, gpu.pci_address)
    assert len(tick()) == 1  # a new transition
    results = runner.results()
    assert [(r.trigger, r.result, r.reason) for r in results] == [
        ("AUTO_UNHEALTHY_GPU_WATCH", "Failed", "GpuNotFound")
    ] * 2
    assert cluster.reasons() == ["TestFailed", "TestFailed"]


TRAINER = PodRef("team-a", "trainer-0", "main")


def test_held_gpus_names_the_holders_of_any_part_of_a_gpu(amd: GpuNode) -> None:
    first, second, third = amd.devices[:3]
    holders = {
        first.partitions[3].id: (TRAINER,),  # one CPX partition of the first GPU
        second.pci_address: (PodRef("team-b", "infer-1", "srv"),),  # a whole GPU by PCI address
        "some-other-device": (TRAINER,),
    }
    ids = [first.id, second.id, third.id, "vanished-gpu"]
    assert held_gpus(ids, amd.devices, holders) == {
        first.id: ["team-a/trainer-0/main"],
        second.id: ["team-b/infer-1/srv"],
    }
    assert held_gpus(ids, amd.devices, {}) == {}


def test_an_unhealthy_gpu_a_workload_holds_is_tested_once_it_is_free(
    amd: GpuNode, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any, wait: Any
) -> None:
    clock = Clock()
    config = TestRunnerConfig(recipe="gpuop-selfcheck", poll_interval_seconds=30)
    runner = make_runner(amd, kube_api_client)
    gpu = amd.devices[1]
    held: dict[str, tuple[PodRef, ...]] | None = {gpu.partitions[0].id: (TRAINER,)}
    agent = make_agent(runner, kube_api_client, config, clock, holders=lambda: held)

    def tick() -> list[RunRequest]:
        clock.now += 30
        started = agent.tick()
        wait(lambda: not agent.busy(), "the runs to finish")
        return started

    assert tick() == []  # baseline
    raise_ras(amd.root, gpu.pci_address)
    assert tick() == []  # held: deferred
    assert tick() == []  # still held: no second Event
    deferred = [m for reason, _type, m in cluster.events() if reason == "TestDeferred"]
    assert deferred == [
        f"GPU {gpu.id} turned unhealthy; testing it waits until it is free (held by team-a/trainer-0/main)"
    ]
    held = {}  # the workload left
    (started,) = tick()
    assert (started.trigger, started.gpu_ids) == ("AUTO_UNHEALTHY_GPU_WATCH", frozenset({gpu.id}))
    assert tick() == []  # tested: waits for the next transition


def test_a_held_gpu_that_recovers_is_not_tested_and_unknown_holders_mean_test(
    amd: GpuNode, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any, wait: Any
) -> None:
    clock = Clock()
    config = TestRunnerConfig(recipe="gpuop-selfcheck", poll_interval_seconds=30)
    runner = make_runner(amd, kube_api_client)
    gpu = amd.devices[4]
    held: dict[str, tuple[PodRef, ...]] | None = {gpu.id: (TRAINER,)}
    agent = make_agent(runner, kube_api_client, config, clock, holders=lambda: held)

    def tick() -> list[RunRequest]:
        clock.now += 30
        started = agent.tick()
        wait(lambda: not agent.busy(), "the runs to finish")
        return started

    assert tick() == []
    raise_ras(amd.root, gpu.pci_address)
    assert tick() == []  # held: deferred
    raise_ras(amd.root, gpu.pci_address, by=-1)  # back to the baseline count: healthy again
    assert tick() == []
    held = {}
    assert tick() == []  # recovered before it was free: nothing to test
    held = None  # the kubelet cannot say who holds what (socket absent, old kubelet)
    raise_ras(amd.root, gpu.pci_address)
    (started,) = tick()  # a silent agent that never tests would be worse than disturbing a workload
    assert started.gpu_ids == frozenset({gpu.id})
    assert runner.results()[-1].trigger == "AUTO_UNHEALTHY_GPU_WATCH"


def test_no_auto_runs_unless_the_trigger_says_so(
    amd: GpuNode, make_runner: MakeRunner, kube_api_client: Any
) -> None:
    clock = Clock()
    agent = make_agent(make_runner(amd, kube_api_client), kube_api_client, MANUAL_ONLY, clock)
    agent.tick()
    vanish_gpu(amd.root, amd.devices[0].pci_address)
    clock.now += 1000
    assert agent.tick() == []


def test_two_runs_for_one_gpu_are_serialised(
    amd: GpuNode, tools: FakeTools, make_runner: MakeRunner, kube_api_client: Any, wait: Any
) -> None:
    marks = tools.bin / "marks"
    ready = tools.bin / "go"
    # Each run marks its start, waits until the test lets it go, then marks its end.
    tools.write(
        "agfhc",
        f'echo "start $2" >> "{marks}"\nwhile [ ! -e "{ready}" ]; do sleep 0.05; done\n'
        f'echo "end $2" >> "{marks}"\necho "t GPU0 PASS"\n',
    )
    recipe = Recipe(name="one", framework="AGFHC", command=["agfhc", "-i", "{gpu_indices}"])
    runner = make_runner(amd, kube_api_client)
    only_gpu0 = frozenset({amd.devices[0].id})
    threads = [
        threading.Thread(
            target=runner.executor.run, args=(RunRequest(recipe=recipe, trigger="MANUAL", gpu_ids=only_gpu0),)
        )
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    wait(marks.exists, "the first run to start")
    # The second run waits for GPU 0 while the first holds it; a run on another GPU is not held up.
    other = RunRequest(recipe=recipe, trigger="MANUAL", gpu_ids=frozenset({amd.devices[1].id}))
    other_thread = threading.Thread(target=runner.executor.run, args=(other,))
    other_thread.start()
    wait(lambda: marks.read_text().count("start") == 2, "the run on GPU 1 to start")
    assert marks.read_text().split("\n")[:2] == ["start 0", "start 1"]
    ready.touch()
    for thread in [*threads, other_thread]:
        thread.join(60)
    lines = marks.read_text().split()
    gpu0 = [" ".join(lines[i : i + 2]) for i in range(0, len(lines), 2) if lines[i + 1] == "0"]
    assert gpu0 == ["start 0", "end 0", "start 0", "end 0"]
    assert len(runner.results()) == 3


def test_restart_records_an_unfinished_run_as_aborted(
    amd: GpuNode, make_runner: MakeRunner, cluster: Cluster, kube_api_client: Any
) -> None:
    dead = make_runner(amd, kube_api_client)
    cluster.annotate({REQUEST_ANNOTATION: "gst_single:req-9"})
    # What a process killed mid-run leaves: a status file that still says running.
    logfile, _status = dead.store.begin(
        "abc123",
        datetime.now(UTC),
        {
            "runId": "abc123",
            "recipe": "gst_single",
            "framework": "RVS",
            "trigger": "MANUAL",
            "requestId": "req-9",
            "request": "gst_single:req-9",
            "start": datetime.now(UTC).isoformat(),
        },
    )
    logfile.close()
    fresh = make_runner(amd, kube_api_client)
    (result,) = fresh.executor.recover_unfinished()
    assert (result.run_id, result.result, result.reason) == ("abc123", "Aborted", "Interrupted")
    assert cluster.reasons() == ["TestAborted"]
    assert cluster.answer()["result"] == "Aborted"
    assert cluster.answer()["requestId"] == "req-9"
    assert REQUEST_ANNOTATION not in cluster.annotations()
    assert ANSWER_ANNOTATION in cluster.annotations()
    assert fresh.executor.recover_unfinished() == []  # recorded once
    assert RecipeBook().get("gst_single").framework == "RVS"


def test_a_config_reload_does_not_touch_a_run_in_progress(
    amd: GpuNode,
    tools: FakeTools,
    make_runner: MakeRunner,
    cluster: Cluster,
    kube_api_client: Any,
    *,
    wait: Any,
) -> None:
    started, go = tools.bin / "started", tools.bin / "go"
    tools.write(
        "agfhc",
        f'echo "$@" > "{started}"\nwhile [ ! -e "{go}" ]; do sleep 0.05; done\necho "t all PASS"\n',
    )
    mine = Recipe(name="mine", framework="AGFHC", command=["agfhc", "-r", "first"])
    configs = [TestRunnerConfig(trigger="MANUAL", recipes=[mine])]
    runner = make_runner(amd, kube_api_client)
    agent = TestRunnerAgent(
        executor=runner.executor,
        api=kube_api_client,
        node_name="gpu-node",
        config=lambda: configs[-1],
        stopping=runner.stopping,
    )
    cluster.annotate({REQUEST_ANNOTATION: "mine:reload"})
    assert len(agent.tick()) == 1
    wait(started.exists, "the run to start")
    # The ConfigMap changes the recipe while it runs: the run keeps the command it started with.
    configs.append(
        TestRunnerConfig(trigger="MANUAL", recipes=[mine.model_copy(update={"command": ["false"]})])
    )
    go.touch()
    wait(lambda: REQUEST_ANNOTATION not in cluster.annotations(), "the answer")
    assert started.read_text().split() == ["-r", "first"]
    assert cluster.answer()["result"] == "Passed"
