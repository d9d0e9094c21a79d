"""A test run from request to report: pick the GPUs, hold them, log, run, record, report.

One run per GPU at a time: a run holds every GPU its command can touch (the targets when the
command names them, else all of the node's) and a second run for any of those waits for it.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuop_common.gpu import GpuBackend, GpuDevice, open_backends
from gpuop_common.gpu.amd_topology import TopologyCache
from gpuop_common.shutdown import Stopping

from gpuop_test_runner.gpus import selfcheck, targets_for
from gpuop_test_runner.logstore import RunLogStore
from gpuop_test_runner.process import LocalTools, ToolRunner
from gpuop_test_runner.recipes import Recipe
from gpuop_test_runner.report import Reporter
from gpuop_test_runner.results import BAD_REQUEST, Outcome, RunResult, Trigger
from gpuop_test_runner.toolrun import ToolRun, run_recipe

log = logging.getLogger(__name__)

_LOCK_POLL_S = 0.2


class GpuLocks:
    """All-or-nothing holds on sets of GPU ids (never a partial hold, so never a deadlock)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._busy: set[str] = set()

    @contextmanager
    def hold(self, ids: Iterable[str], should_stop: Callable[[], bool]) -> Iterator[bool]:
        """Yields True once every id is held, False if stopping came first (nothing held then)."""
        wanted = set(ids)
        got = False
        with self._cond:
            while not should_stop():
                if not self._busy & wanted:
                    self._busy |= wanted
                    got = True
                    break
                self._cond.wait(_LOCK_POLL_S)
        try:
            yield got
        finally:
            if got:
                with self._cond:
                    self._busy -= wanted
                    self._cond.notify_all()


@dataclass(frozen=True)
class RunRequest:
    recipe: Recipe
    trigger: Trigger
    request_id: str | None = None
    request: str | None = None  # the annotation value this run answers
    gpu_ids: frozenset[str] | None = None  # None: every GPU of the node


def _now() -> datetime:
    return datetime.now(UTC)


class TestExecutor:
    __test__ = False

    def __init__(
        self,
        *,
        host_root: Path,
        store: RunLogStore,
        reporter: Reporter,
        stopping: Stopping,
        tool_path: str,
        advertised_gpus: Callable[[], int | None] = lambda: None,
        vendor: str = "auto",
        nvml: Any | None = None,
        locks: GpuLocks | None = None,
        tools_for: Callable[[Recipe], ToolRunner] | None = None,
    ) -> None:
        self.host_root = host_root
        self.store = store
        self.reporter = reporter
        self.stopping = stopping
        self.tool_path = tool_path
        self.advertised_gpus = advertised_gpus
        self.vendor = vendor
        self.nvml = nvml
        self.locks = locks or GpuLocks()
        # Where a vendor recipe's tool runs (its tools image, or this host); read per run, so a
        # config reload's toolsImage applies to the next run.
        self.tools_for = tools_for or (lambda _recipe: LocalTools(tool_path))
        # Each run opens its own backends (a driver reload between runs must be seen), but the
        # KFD topology walk (~4,600 files on an MI300X in CPX) is repeated only when the kernel
        # rebuilt the topology: generation_id says so.
        self.topology = TopologyCache()

    def run(self, request: RunRequest) -> RunResult:
        backends = open_backends(self.host_root, self.vendor, nvml=self.nvml, topology=self.topology)
        try:
            devices = [d for b in backends for d in b.enumerate()]
            # A vendor's tool tests only that vendor's GPUs (a mixed node has both).
            chosen = [
                d
                for d in devices
                if (request.gpu_ids is None or d.id in request.gpu_ids)
                and request.recipe.vendor in ("any", d.vendor.value)
            ]
            held = [d.id for d in chosen] if request.recipe.targets_gpus else [d.id for d in devices]
            with self.locks.hold(held, self.stopping.is_set) as got:
                if not got:
                    return self._finish_unstarted(request, chosen)
                return self._run_held(request, backends, chosen, devices)
        finally:
            for backend in backends:
                backend.close()

    def _started(
        self, run_id: str, request: RunRequest, chosen: list[GpuDevice], start: datetime
    ) -> dict[str, Any]:
        return {
            "runId": run_id,
            "recipe": request.recipe.name,
            "framework": request.recipe.framework,
            "trigger": request.trigger,
            "requestId": request.request_id,
            "request": request.request,
            "gpus": [d.id for d in chosen],
            "start": start.isoformat(),
        }

    def _run_held(
        self,
        request: RunRequest,
        backends: list[GpuBackend],
        chosen: list[GpuDevice],
        devices: list[GpuDevice],
    ) -> RunResult:
        recipe = request.recipe
        run_id, start = uuid.uuid4().hex[:12], _now()
        self.reporter.metrics.running.inc()
        logfile, status = self.store.begin(run_id, start, self._started(run_id, request, chosen, start))
        try:
            log.info(
                "test run started",
                extra={
                    "run_id": run_id,
                    "recipe": recipe.name,
                    "trigger": request.trigger,
                    "gpus": [d.index for d in chosen],
                },
            )
            with logfile:
                gone = sorted((request.gpu_ids or frozenset()) - {d.id for d in devices})
                if gone:
                    # An unhealthy GPU that fell off the bus cannot be tested, and is no pass.
                    message = f"GPU {', '.join(gone)} not found on the node"
                    logfile.write(f"--- gpuop: {message}\n")
                    outcome = ToolRun(outcome="Failed", reason="GpuNotFound", message=message)
                else:
                    outcome = self._execute(recipe, backends, chosen, devices, logfile)
        finally:
            self.reporter.metrics.running.dec()
        result = RunResult(
            run_id=run_id,
            request_id=request.request_id,
            recipe=recipe.name,
            framework=recipe.framework,
            trigger=request.trigger,
            result=outcome.outcome,
            reason=outcome.reason,
            message=outcome.message,
            gpus=outcome.gpus,
            start=start,
            end=_now(),
            iterations=outcome.iterations,
            output_head=outcome.output_head,
        )
        self.store.finish(status, result)
        self.reporter.report(result, request.request)
        return result

    def _execute(
        self,
        recipe: Recipe,
        backends: list[GpuBackend],
        chosen: list[GpuDevice],
        devices: list[GpuDevice],
        logfile: Any,
    ) -> ToolRun:
        if recipe.framework == "selfcheck":
            wanted = {d.id for d in chosen}
            report = selfcheck(self.host_root, backends, devices, wanted, self.advertised_gpus())
            logfile.write(f"--- gpuop: self-check: {report.message}\n")
            for gpu in report.gpus:
                logfile.write(f"GPU {gpu.index} {gpu.gpu}: {gpu.result} {gpu.detail}\n")
            outcome: Outcome = "Failed" if report.reason else "Passed"
            return ToolRun(
                outcome=outcome, reason=report.reason, message=report.message, gpus=report.gpus, iterations=1
            )
        if not chosen:
            kind = "" if recipe.vendor == "any" else f"{recipe.vendor} "
            return ToolRun(outcome="Failed", reason="NoGpus", message=f"no {kind}GPU to test on this node")
        return run_recipe(
            recipe,
            targets_for(self.host_root, chosen),
            log=logfile,
            should_stop=self.stopping.is_set,
            tools=self.tools_for(recipe),
        )

    def _finish_unstarted(self, request: RunRequest, chosen: list[GpuDevice]) -> RunResult:
        now = _now()
        result = RunResult(
            run_id=uuid.uuid4().hex[:12],
            request_id=request.request_id,
            recipe=request.recipe.name,
            framework=request.recipe.framework,
            trigger=request.trigger,
            result="Aborted",
            reason="Stopped",
            message="stopped while waiting for a GPU held by another run",
            start=now,
            end=now,
        )
        self.reporter.report(result, request.request)
        return result

    def reject(self, request: str, why: str) -> RunResult:
        """Answer a request that cannot run (bad format, unknown recipe) without testing anything."""
        recipe, _, request_id = request.partition(":")
        now = _now()
        result = RunResult(
            run_id=uuid.uuid4().hex[:12],
            request_id=request_id or None,
            recipe=recipe[:128] or "?",
            framework="?",
            trigger="MANUAL",
            result="Failed",
            reason=BAD_REQUEST,
            message=why,
            start=now,
            end=now,
        )
        self.reporter.report(result, request)
        return result

    def recover_unfinished(self) -> list[RunResult]:
        """Runs a previous process left `running` become Aborted results, reported like any other."""
        recovered = []
        for run in self.store.unfinished():
            data = run.started
            try:
                start = datetime.fromisoformat(str(data.get("start")))
            except ValueError:
                start = _now()
            result = RunResult(
                run_id=str(data.get("runId", run.status_file.stem)),
                request_id=data.get("requestId"),
                recipe=str(data.get("recipe", "?")),
                framework=str(data.get("framework", "?")),
                trigger=data.get("trigger", "MANUAL"),
                result="Aborted",
                reason="Interrupted",
                message="the test runner ended before the run finished",
                start=start,
                end=_now(),
            )
            self.store.finish(run.status_file, result)
            self.reporter.report(result, data.get("request"))
            recovered.append(result)
        return recovered
