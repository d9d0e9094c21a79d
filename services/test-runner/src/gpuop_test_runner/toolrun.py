"""One recipe's tool iterations on a set of target GPUs -> outcome, reason and per-GPU results."""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TextIO

from gpuop_test_runner.parsers import PARSERS, UnparsableOutputError, first_lines
from gpuop_test_runner.process import ToolMissingError, ToolRunner
from gpuop_test_runner.recipes import Recipe
from gpuop_test_runner.results import GpuResult, GpuTarget, Outcome, attribute, merge_gpu_results


@dataclass
class ToolRun:
    outcome: Outcome = "Passed"
    reason: str = ""
    message: str = ""
    gpus: list[GpuResult] = field(default_factory=list)
    iterations: int = 0
    output_head: list[str] = field(default_factory=list)


def _all(targets: Sequence[GpuTarget], detail: str) -> list[GpuResult]:
    return [GpuResult(gpu=t.id, index=t.index, result="failed", detail=detail) for t in targets]


def _batches(recipe: Recipe, targets: Sequence[GpuTarget]) -> list[list[GpuTarget]]:
    return [[t] for t in targets] if recipe.scope == "per-gpu" else [list(targets)]


def run_recipe(
    recipe: Recipe,
    targets: Sequence[GpuTarget],
    *,
    log: TextIO,
    should_stop: Callable[[], bool],
    tools: ToolRunner,
) -> ToolRun:
    """Run the iterations; the recipe's timeout bounds the whole run, all iterations together."""
    deadline = time.monotonic() + recipe.timeout_seconds
    run = ToolRun()
    collected: list[list[GpuResult]] = []
    for iteration in range(1, recipe.iterations + 1):
        run.iterations = iteration
        iteration_failed = False
        for batch in _batches(recipe, targets):
            argv = recipe.argv(t.index for t in batch)
            log.write(f"--- gpuop: iteration {iteration}/{recipe.iterations}: {shlex.join(argv)}\n")
            log.flush()
            stop = _one(
                recipe,
                batch,
                argv,
                run,
                collected,
                log=log,
                should_stop=should_stop,
                tools=tools,
                remaining=max(0.0, deadline - time.monotonic()),
            )
            if stop:
                run.gpus = merge_gpu_results(collected)
                return run
            failed_gpu = any(r.result == "failed" for r in collected[-1])
            iteration_failed = iteration_failed or failed_gpu or run.outcome != "Passed"
        if iteration_failed and recipe.stop_on_failure:
            break
    run.gpus = merge_gpu_results(collected)
    if run.outcome == "Passed" and any(r.result == "failed" for r in run.gpus):
        failed = ",".join(str(r.index) for r in run.gpus if r.result == "failed")
        run.outcome, run.reason, run.message = "Failed", "GpuFailed", f"GPU index {failed} failed"
    return run


def _one(
    recipe: Recipe,
    batch: list[GpuTarget],
    argv: list[str],
    run: ToolRun,
    collected: list[list[GpuResult]],
    *,
    log: TextIO,
    should_stop: Callable[[], bool],
    tools: ToolRunner,
    remaining: float,
) -> bool:
    """One command; records into `run`/`collected`; True when the run must end now."""
    try:
        out = tools.run(argv, timeout=remaining, log=log, should_stop=should_stop)
    except ToolMissingError as exc:
        run.outcome, run.reason, run.message = "ToolMissing", "ToolMissing", str(exc)
        return True
    except OSError as exc:  # found but not runnable (no exec permission, bad interpreter)
        run.outcome, run.reason, run.message = "Failed", "ToolNotRunnable", f"{argv[0]}: {exc}"
        collected.append(_all(batch, run.message))
        return True
    if out.aborted:
        run.outcome, run.reason, run.message = "Aborted", "Stopped", "the test runner was stopped"
        run.output_head = first_lines(out.output)
        return True
    if out.timed_out:
        run.outcome, run.reason = "TimedOut", "TimedOut"
        run.message = f"no result within {recipe.timeout_seconds}s"
        run.output_head = first_lines(out.output)
        collected.append(_all(batch, "timed out"))
        return True
    try:
        verdicts = PARSERS[recipe.framework](out.output)
    except UnparsableOutputError as exc:
        run.outcome, run.reason, run.message = (
            "Failed",
            "UnparsableOutput",
            f"{exc.reason} (exit code {out.exit_code})",
        )
        run.output_head = exc.head
        collected.append(_all(batch, "unparsable output"))
        return True
    collected.append(attribute(verdicts, batch))
    if out.exit_code not in recipe.pass_exit_codes:
        # The exit code is a pass criterion of its own: a crash after good lines is still a failure.
        run.outcome, run.reason = "Failed", "ExitCode"
        run.message = f"{argv[0]} exited with {out.exit_code}"
        run.output_head = first_lines(out.output)
    return False
