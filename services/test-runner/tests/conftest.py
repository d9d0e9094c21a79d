"""Shared helpers for the test runner tests: fake tools on PATH, a fixture node, its Node and Events."""

from __future__ import annotations

import json
import os
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.gpu import GpuDevice, open_backends
from gpuop_common.shutdown import Stopping
from gpuop_sim.nodes import NodeRootInfo
from gpuop_test_runner.executor import TestExecutor
from gpuop_test_runner.gpus import targets_for
from gpuop_test_runner.logstore import RunLogStore
from gpuop_test_runner.metrics import TestRunnerMetrics
from gpuop_test_runner.report import Reporter
from gpuop_test_runner.results import GpuTarget, RunResult
from kubernetes import client

NODE = "gpu-node"
DEADLINE_S = 60.0


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = DEADLINE_S) -> Any:
    """Poll a condition with a generous deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class FakeTools:
    """Executables written into a temp dir that the tests put first on PATH."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        bin_dir.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, script: str) -> Path:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + script)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return path

    def prints(self, name: str, output: str, exit_code: int = 0) -> Path:
        """A tool that prints `output` (kept in a file beside it, so any text works) and exits."""
        (self.bin / f"{name}.out").write_text(output)
        return self.write(name, f'cat "{self.bin / f"{name}.out"}"\nexit {exit_code}\n')

    def hangs(self, name: str) -> Path:
        """Prints a line, starts a worker in its process group, records both pids, then waits forever."""
        pids = self.bin / f"{name}.pids"
        return self.write(
            name,
            f'echo "starting {name}"\nsleep 600 &\necho $$ $! > "{pids}"\nwait\n',
        )

    def pids(self, name: str) -> list[int]:
        path = self.bin / f"{name}.pids"
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def remove(self, name: str) -> None:
        (self.bin / name).unlink(missing_ok=True)

    def all_gone(self, name: str) -> bool:
        """The tool and the worker it started have exited."""
        pids = self.pids(name)
        return bool(pids) and not any(alive(pid) for pid in pids)


@pytest.fixture
def wait() -> Callable[..., Any]:
    return wait_until


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers signal 0; it has exited for what a test cares about.
    status = Path(f"/proc/{pid}/stat")
    return status.exists() and status.read_text().split(") ", 1)[-1][:1] != "Z"


@pytest.fixture
def tools(tmp_path: Path) -> FakeTools:
    return FakeTools(tmp_path / "bin")


@dataclass
class GpuNode:
    info: NodeRootInfo
    devices: list[GpuDevice]
    targets: list[GpuTarget]

    @property
    def root(self) -> Path:
        return self.info.root


@pytest.fixture
def gpu_node(
    gpu_node_root: Callable[..., NodeRootInfo], monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], GpuNode]:
    """`gpu_node("amd-mi300x-cpx")`: a fixture host root, its GPUs and their test targets."""

    def make(profile: str) -> GpuNode:
        info = gpu_node_root(profile, NODE)
        for key, value in info.env.items():
            monkeypatch.setenv(key, value)
        backends = open_backends(info.root)
        try:
            devices = [d for b in backends for d in b.enumerate()]
        finally:
            for backend in backends:
                backend.close()
        return GpuNode(info, devices, targets_for(info.root, devices))

    return make


class Cluster:
    """The Node and its Events on the simulated API server, through the real client."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)

    def create_node(self, labels: dict[str, str] | None = None) -> None:
        self.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=NODE, labels=labels or {})))

    def labels(self) -> dict[str, str]:
        return dict(self.core.read_node(NODE).metadata.labels or {})

    def annotations(self) -> dict[str, str]:
        return dict(self.core.read_node(NODE).metadata.annotations or {})

    def annotate(self, annotations: dict[str, str | None]) -> None:
        self.core.patch_node(
            NODE, {"metadata": {"annotations": annotations}}, _content_type="application/merge-patch+json"
        )

    def answer(self) -> dict[str, Any]:
        return dict(json.loads(self.annotations()["gpuop.dev/test-result"]))

    def _node_events(self) -> list[Any]:
        items = self.core.list_namespaced_event("default").items
        mine = [e for e in items if e.involved_object.kind == "Node" and e.involved_object.name == NODE]
        return sorted(mine, key=lambda e: (e.first_timestamp, e.metadata.name))

    def events(self) -> list[tuple[str, str, str]]:
        """(reason, type, message) of the Events about the Node, oldest first."""
        return [(e.reason, e.type, e.message) for e in self._node_events()]

    def reasons(self) -> list[str]:
        """Event reasons, a repeat folded into one Event (count > 1) listed as often as it happened."""
        return [e.reason for e in self._node_events() for _ in range(e.count or 1)]


@pytest.fixture
def cluster(kube_api_client: Any) -> Iterator[Cluster]:
    yield Cluster(kube_api_client)


@dataclass
class Runner:
    executor: TestExecutor
    store: RunLogStore
    metrics: TestRunnerMetrics
    stopping: Stopping

    def logs(self) -> list[Path]:
        return sorted(self.store.directory.glob("*.log"))

    def last_log(self) -> str:
        return self.logs()[-1].read_text()

    def results(self) -> list[RunResult]:
        return self.store.results()


@pytest.fixture
def make_runner(tmp_path: Path, tools: FakeTools) -> Callable[..., Runner]:
    """An executor on a node root, reporting to `api` (None: no cluster), tools from `tools` only."""

    def make(node: GpuNode, api: Any | None, *, keep: int = 20, advertised: int | None = None) -> Runner:
        metrics = TestRunnerMetrics()
        stopping = Stopping()
        store = RunLogStore(tmp_path / "logs", keep=keep)
        executor = TestExecutor(
            host_root=node.root,
            store=store,
            reporter=Reporter(api, NODE, metrics),
            stopping=stopping,
            tool_path=os.pathsep.join([str(tools.bin), "/usr/bin", "/bin"]),
            advertised_gpus=lambda: advertised,
        )
        return Runner(executor, store, metrics, stopping)

    return make
