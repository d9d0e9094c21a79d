"""The result of one run and what it becomes on the Node: an Event, a label, annotations (pure)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from gpuop_common.kube import EventType
from gpuop_common.nodemeta import (
    TEST_ANSWER_ANNOTATION,
    TEST_REQUEST_ANNOTATION,
    TEST_RESULT_LABEL,
    TEST_RESULT_TIME_ANNOTATION,
)
from pydantic import BaseModel, ConfigDict, Field

from gpuop_test_runner.parsers import Verdicts

Outcome = Literal["Passed", "Failed", "TimedOut", "ToolMissing", "Aborted"]
Trigger = Literal["AUTO_UNHEALTHY_GPU_WATCH", "PRE_START_JOB_CHECK", "MANUAL"]
GpuVerdict = Literal["passed", "failed"]

RESULT_LABEL = TEST_RESULT_LABEL
RESULT_TIME_ANNOTATION = TEST_RESULT_TIME_ANNOTATION
REQUEST_ANNOTATION = TEST_REQUEST_ANNOTATION
ANSWER_ANNOTATION = TEST_ANSWER_ANNOTATION

BAD_REQUEST = "BadRequest"  # reason of a request that named no usable recipe: nothing was tested
CONFIG_ERROR_EVENT = "TestConfigError"

EVENT_REASONS: dict[Outcome, tuple[str, EventType]] = {
    "Passed": ("TestPassed", "Normal"),
    "Failed": ("TestFailed", "Warning"),
    "TimedOut": ("TestTimedOut", "Warning"),
    "ToolMissing": ("ToolMissing", "Warning"),
    "Aborted": ("TestAborted", "Warning"),
}


@dataclass(frozen=True, slots=True)
class GpuTarget:
    """A GPU a run tests, with every name a tool may use for it."""

    id: str
    index: int
    pci_address: str
    kfd_gpu_ids: tuple[int, ...] = ()

    def keys(self) -> set[str]:
        return {self.id, str(self.index), self.pci_address, *(str(k) for k in self.kfd_gpu_ids)}


class GpuResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    gpu: str
    index: int
    result: GpuVerdict
    detail: str = ""


class RunResult(BaseModel):
    """One run as logged, reported on the Node and answered to a request."""

    model_config = ConfigDict(frozen=True)

    run_id: str
    request_id: str | None = None
    recipe: str
    framework: str
    trigger: Trigger
    result: Outcome
    reason: str = ""  # machine-readable cause of a non-pass: ExitCode, UnparsableOutput, GpuCountMismatch...
    message: str = ""
    gpus: list[GpuResult] = Field(default_factory=list)
    start: datetime
    end: datetime
    iterations: int = 0
    output_head: list[str] = Field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.result == "Passed"

    @property
    def duration_s(self) -> float:
        return max(0.0, (self.end - self.start).total_seconds())


def attribute(verdicts: Verdicts, targets: Iterable[GpuTarget]) -> list[GpuResult]:
    """Verdicts by the tool's GPU names -> one result per target GPU.

    A target the output does not mention is judged by the results that name no GPU; with none of
    those either it is failed: no evidence is not a pass.
    """
    results = []
    for target in targets:
        keys = target.keys()
        own = [passed for key, passed in verdicts.gpus.items() if key in keys]
        if own:
            passed = all(own) and verdicts.node is not False
            detail = "" if passed else _failure_detail(verdicts, keys)
        elif verdicts.node is not None:
            passed, detail = verdicts.node, "" if verdicts.node else _failure_detail(verdicts, keys)
        else:
            passed, detail = False, "not in the tool's output"
        results.append(
            GpuResult(
                gpu=target.id, index=target.index, result="passed" if passed else "failed", detail=detail
            )
        )
    return results


def _failure_detail(verdicts: Verdicts, keys: set[str]) -> str:
    mine = [f for f in verdicts.failures if f.rsplit(" on GPU ", 1)[-1] in keys or " on GPU " not in f]
    return "; ".join(mine[:5])


def merge_gpu_results(runs: Iterable[Iterable[GpuResult]]) -> list[GpuResult]:
    """Iterations (or per-GPU commands) -> one result per GPU: failed once is failed."""
    merged: dict[str, GpuResult] = {}
    for results in runs:
        for result in results:
            seen = merged.get(result.gpu)
            if seen is None or (seen.result == "passed" and result.result == "failed"):
                merged[result.gpu] = result
    return sorted(merged.values(), key=lambda r: r.index)


def summary(result: RunResult) -> str:
    """The one-line Event message."""
    failed = [str(r.index) for r in result.gpus if r.result == "failed"]
    text = f"{result.recipe} ({result.framework}, {result.trigger}): {result.result}"
    if result.reason:
        text += f" [{result.reason}]"
    if result.gpus:
        text += f"; {len(result.gpus) - len(failed)}/{len(result.gpus)} GPUs passed"
    if failed:
        text += f", failed GPU index {','.join(failed)}"
    if result.message:
        text += f": {result.message}"
    return text


def answer_json(result: RunResult) -> str:
    """The `gpuop.dev/test-result` answer the operator reads (docs/test-runner.md)."""
    return json.dumps(
        {
            "requestId": result.request_id,
            "recipe": result.recipe,
            "result": result.result,
            "reason": result.reason,
            "gpus": [{"gpu": r.gpu, "index": r.index, "result": r.result} for r in result.gpus],
            "start": _iso(result.start),
            "end": _iso(result.end),
        },
        separators=(",", ":"),
    )


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def judged(result: RunResult) -> bool:
    """Did the run judge the GPUs? Not when the tool was missing, the run aborted, or the request bad."""
    return result.result in ("Passed", "Failed", "TimedOut") and result.reason != BAD_REQUEST


def event_for(result: RunResult) -> tuple[str, EventType]:
    if result.reason == BAD_REQUEST:
        return CONFIG_ERROR_EVENT, "Warning"
    return EVENT_REASONS[result.result]


def node_changes(
    result: RunResult, current_annotations: Mapping[str, str], request: str | None
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """(labels, annotations) merge-patch parts for a finished run.

    The label says passed/failed only when the GPUs were actually judged; a missing tool or an
    aborted run says nothing about them and leaves the last verdict. A run that answers a request
    writes the answer and clears the request, but only if the request is still the one it answers.
    """
    labels: dict[str, str | None] = {}
    annotations: dict[str, str | None] = {}
    if judged(result):
        labels[RESULT_LABEL] = "passed" if result.passed else "failed"
        annotations[RESULT_TIME_ANNOTATION] = _iso(result.end)
    if request is not None:
        annotations[ANSWER_ANNOTATION] = answer_json(result)
        if current_annotations.get(REQUEST_ANNOTATION) == request:
            annotations[REQUEST_ANNOTATION] = None
    return labels, annotations
