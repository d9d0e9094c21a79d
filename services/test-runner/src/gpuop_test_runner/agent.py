"""The agent loop: answer request annotations, test GPUs that turn unhealthy, one thread per run.

Each `tick()` reads the Node once for a `gpuop.dev/test-request` and, when due, polls GPU health.
Runs go to worker threads so a long burn-in on one GPU does not delay a request for another; the
executor's GPU holds serialise runs that share a GPU.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuop_common.config.testrunner import TestRunnerConfig
from gpuop_common.gpu import GpuBackend, GpuBackendError, open_backends
from gpuop_common.kube import read_node_metadata
from gpuop_common.shutdown import Stopping
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop_test_runner.executor import RunRequest, TestExecutor
from gpuop_test_runner.recipes import RecipeBook, RecipeError
from gpuop_test_runner.results import REQUEST_ANNOTATION, RunResult
from gpuop_test_runner.triggers import UnhealthyTransitions, held_gpus, parse_request

log = logging.getLogger(__name__)

GPU_COUNT_LABEL = "gpuop.dev/gpu.count"
# Device id -> who holds it (kubelet pod-resources); None when that cannot be known right now.
Holders = Callable[[], Mapping[str, Sequence[object]] | None]
REQUEST_TIMEOUT_S = 15.0


def advertised_gpu_count(api: client.ApiClient | None, node_name: str) -> int | None:
    """The node's `gpuop.dev/gpu.count` label (written by the labeller); None when unknown."""
    if api is None or not node_name:
        return None
    try:
        metadata = read_node_metadata(api, node_name, REQUEST_TIMEOUT_S)
    except ApiException as exc:
        log.warning("cannot read the node for its GPU count", extra={"status": exc.status})
        return None
    value = str((metadata.get("labels") or {}).get(GPU_COUNT_LABEL, ""))
    return int(value) if value.isdigit() else None


class TestRunnerAgent:
    __test__ = False

    def __init__(
        self,
        *,
        executor: TestExecutor,
        api: client.ApiClient | None,
        node_name: str,
        config: Callable[[], TestRunnerConfig],
        stopping: Stopping,
        vendor: str = "auto",
        nvml: Any | None = None,
        clock: Callable[[], float] = time.monotonic,
        holders: Holders = lambda: None,
    ) -> None:
        self.executor = executor
        self.clock = clock
        self.api = api
        self.node_name = node_name
        self.config = config
        self.stopping = stopping
        self.vendor = vendor
        self.nvml = nvml
        self.transitions = UnhealthyTransitions()
        self.holders = holders
        self._waiting: set[str] = set()  # unhealthy GPUs a workload holds, tested once free
        self._health_backends: list[GpuBackend] | None = None
        self._next_health = 0.0
        self._in_flight: set[str] = set()
        self._lock = threading.Lock()
        self._workers: list[threading.Thread] = []
        self.finished: list[RunResult] = []  # newest last; what tests and --once look at

    # triggers ------------------------------------------------------------------------------------
    def tick(self) -> list[RunRequest]:
        """Read the triggers once and start a run for each; returns what was started."""
        started = [r for r in (self._request(), *self._unhealthy()) if r is not None]
        for request in started:
            self._dispatch(request)
        return started

    def _request(self) -> RunRequest | None:
        if self.api is None or not self.node_name:
            return None
        try:
            metadata = read_node_metadata(self.api, self.node_name, REQUEST_TIMEOUT_S)
        except ApiException as exc:
            log.warning("cannot read the node for test requests", extra={"status": exc.status})
            return None
        value = (metadata.get("annotations") or {}).get(REQUEST_ANNOTATION)
        with self._lock:
            if value is None or value in self._in_flight:
                return None
        try:
            parsed = parse_request(value)
            recipe = RecipeBook.from_config(self.config()).get(parsed.recipe)
        except (ValueError, RecipeError) as exc:
            self.executor.reject(value, str(exc))
            return None
        return RunRequest(recipe=recipe, trigger="MANUAL", request_id=parsed.request_id, request=value)

    def _unhealthy(self) -> list[RunRequest]:
        config = self.config()
        if config.trigger != "AUTO_UNHEALTHY_GPU_WATCH" or self.clock() < self._next_health:
            return []
        self._next_health = self.clock() + config.poll_interval_seconds
        try:
            if self._health_backends is None:
                self._health_backends = open_backends(self.executor.host_root, self.vendor, nvml=self.nvml)
            health = [h for b in self._health_backends for h in b.health()]
        except GpuBackendError as exc:
            log.warning("GPU health unreadable", extra={"error": str(exc)})
            self.close()
            return []
        turned = self.transitions.update(health)
        self._waiting &= {h.gpu_id for h in health if not h.healthy}  # a recovered GPU waits no more
        candidates = [*turned, *sorted(self._waiting.difference(turned))]
        if not candidates:
            return []
        targets = self._idle(candidates)
        if not targets:
            return []
        log.info("GPUs turned unhealthy, testing them", extra={"gpus": targets})
        try:
            recipe = RecipeBook.from_config(config).for_trigger(config)
        except RecipeError as exc:
            log.error("cannot test unhealthy GPUs", extra={"error": str(exc)})
            return []
        return [RunRequest(recipe=recipe, trigger="AUTO_UNHEALTHY_GPU_WATCH", gpu_ids=frozenset(targets))]

    def _idle(self, candidates: list[str]) -> list[str]:
        """The candidates no workload holds; held ones wait (one Event each) for the next polls.

        A test on a GPU a workload uses would disturb the workload and judge the GPU under load.
        When the kubelet cannot say who holds what, every candidate is tested: an unhealthy GPU
        is already failing its workload, and a silent never-testing agent would be worse."""
        holders = self.holders()
        if holders is None:
            return candidates
        try:
            devices = [d for b in self._health_backends or [] for d in b.enumerate()]
        except GpuBackendError as exc:
            log.warning("cannot enumerate GPUs to find their holders", extra={"error": str(exc)})
            return candidates
        held = held_gpus(candidates, devices, holders)
        for gpu_id in sorted(held.keys() - self._waiting):
            self.executor.reporter.deferred(gpu_id, held[gpu_id])
        self._waiting = set(held)
        return [gpu for gpu in candidates if gpu not in held]

    # runs ----------------------------------------------------------------------------------------
    def _dispatch(self, request: RunRequest) -> None:
        if request.request is not None:
            with self._lock:
                self._in_flight.add(request.request)
        worker = threading.Thread(target=self._work, args=(request,), name="gpuop-test-run", daemon=True)
        with self._lock:
            self._workers = [w for w in self._workers if w.is_alive()] + [worker]
        worker.start()

    def _work(self, request: RunRequest) -> None:
        try:
            result = self.executor.run(request)
            with self._lock:
                self.finished.append(result)
        except Exception:
            log.exception("test run failed to run", extra={"recipe": request.recipe.name})
        finally:
            if request.request is not None:
                with self._lock:
                    self._in_flight.discard(request.request)

    def busy(self) -> bool:
        with self._lock:
            return any(w.is_alive() for w in self._workers)

    def join(self, timeout: float) -> bool:
        """Wait for the runs in progress (they end quickly once stopping is set); True if all ended."""
        deadline = time.monotonic() + timeout
        with self._lock:
            workers = list(self._workers)
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        return not self.busy()

    def run(self, interval: float) -> None:
        """Recover runs the last process left unfinished, then tick every `interval` s until stopping."""
        self.executor.recover_unfinished()
        while not self.stopping.is_set():
            self.tick()
            if self.stopping.wait(interval):
                break

    def close(self) -> None:
        for backend in self._health_backends or []:
            try:
                backend.close()
            except GpuBackendError as exc:
                log.warning("closing GPU backend failed", extra={"error": str(exc)})
        self._health_backends = None  # reopened at the next health poll
