"""Where a finished run goes: an Event on the Node, its label and annotations, the metrics."""

from __future__ import annotations

import logging

from gpuop_common.kube import EventRecorder, ObjectRef, patch_node_metadata, read_node_metadata
from gpuop_common.retry import kube_retry
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop_test_runner.metrics import TestRunnerMetrics
from gpuop_test_runner.results import RunResult, event_for, judged, node_changes, summary

log = logging.getLogger(__name__)

COMPONENT = "gpuop-test-runner"
REQUEST_TIMEOUT_S = 15.0


class Reporter:
    """Reports runs of one node; without an API client (standalone `check`) only metrics and logs."""

    def __init__(
        self,
        api: client.ApiClient | None,
        node_name: str,
        metrics: TestRunnerMetrics,
        *,
        dry_run: bool = False,
    ) -> None:
        self.api = api
        self.node_name = node_name
        self.metrics = metrics
        self.dry_run = dry_run
        self.events = EventRecorder(api, COMPONENT, node_name, dry_run=dry_run) if api is not None else None

    def report(self, result: RunResult, request: str | None = None) -> None:
        """`request` is the annotation value the run answers (None: not a request)."""
        self._metrics(result)
        log.info(
            "test run finished",
            extra={
                "run_id": result.run_id,
                "recipe": result.recipe,
                "result": result.result,
                "reason": result.reason,
                "request_id": result.request_id,
            },
        )
        if self.api is None or not self.node_name:
            return
        reason, type_ = event_for(result)
        assert self.events is not None
        self.events.record(ObjectRef.node(self.node_name), reason, summary(result), type_)
        if self.dry_run:
            return
        try:
            self._patch(result, request)
        except ApiException as exc:
            log.warning("could not update the node with the run result", extra={"status": exc.status})

    def deferred(self, gpu_id: str, holders: list[str]) -> None:
        """An unhealthy GPU a workload holds: its test waits until the GPU is free (one Event)."""
        message = (
            f"GPU {gpu_id} turned unhealthy; testing it waits until it is free (held by {', '.join(holders)})"
        )
        log.info("unhealthy GPU held by a workload, test deferred", extra={"gpu": gpu_id, "holders": holders})
        if self.events is not None and self.node_name:
            self.events.record(ObjectRef.node(self.node_name), "TestDeferred", message, "Normal")

    @kube_retry()
    def _patch(self, result: RunResult, request: str | None) -> None:
        assert self.api is not None
        meta = read_node_metadata(self.api, self.node_name, REQUEST_TIMEOUT_S)
        annotations = dict(meta.get("annotations") or {})
        labels, changes = node_changes(result, annotations, request)
        # The resourceVersion makes "clear the request if it is still this one" atomic: a new
        # request written since our read turns this into a 409, and the retry reads again.
        version = meta.get("resourceVersion") if request is not None else None
        patch_node_metadata(
            self.api, self.node_name, labels=labels, annotations=changes, resource_version=version
        )

    def _metrics(self, result: RunResult) -> None:
        self.metrics.runs.labels(recipe=result.recipe, result=result.result).inc()
        self.metrics.duration.labels(recipe=result.recipe).observe(result.duration_s)
        if judged(result):
            for gpu in result.gpus:
                self.metrics.last_result.labels(
                    gpu=gpu.gpu, gpu_index=str(gpu.index), recipe=result.recipe
                ).set(1 if gpu.result == "passed" else 0)
