"""One labelling pass: read the node's GPUs, compute the labels, bring the Node to them in one PATCH.

The GPU backends are kept open between passes (NVML init is not free) and reopened after a hardware
event, a backend failure, or a pass that sees fewer GPUs than the last one: that is what a driver
reload or a vanished device looks like.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gpuop_common.gpu import GpuBackend, GpuBackendError, GpuDevice, open_backends
from gpuop_common.kube import read_node_metadata
from gpuop_common.kubejson import MERGE_PATCH, NODES, KubeJson
from gpuop_common.retry import kube_retry
from kubernetes import client

from gpuop_node_labeller.labels import LabelOptions, labels_for
from gpuop_node_labeller.metrics import LabellerMetrics
from gpuop_node_labeller.ownership import LabelPlan, describe, plan_labels

log = logging.getLogger(__name__)

# The client waits forever by default; a wedged connection must fail the pass and be retried instead.
REQUEST_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class PassResult:
    labels: dict[str, str]
    plan: LabelPlan
    written: bool  # a PATCH was sent


@kube_retry()
def sync_node_labels(
    api: client.ApiClient, node_name: str, desired: dict[str, str], *, dry_run: bool = False
) -> tuple[LabelPlan, bool]:
    """Read the Node, plan, and send one merge PATCH if anything differs; (plan, written).

    The whole read-plan-write is retried, so a 409 (someone changed the Node since our read) is
    resolved by planning again against the fresh Node.
    """
    meta = read_node_metadata(api, node_name, REQUEST_TIMEOUT_S)
    plan = plan_labels(meta.get("labels"), meta.get("annotations"), desired)
    if plan.empty or dry_run:
        return plan, False
    patch = plan.patch(meta.get("resourceVersion"))
    KubeJson(api, REQUEST_TIMEOUT_S).patch(NODES, node_name, patch, content_type=MERGE_PATCH)
    log.info(
        "node labels updated",
        extra={"node_name": node_name, "set": plan.set, "removed": list(plan.removed)},
    )
    return plan, True


class NodeLabeller:
    """Keeps one Node's labels equal to `labels_for(<its GPUs>, options())`."""

    def __init__(
        self,
        *,
        host_root: Path,
        node_name: str,
        api: client.ApiClient | None,
        options: Callable[[], LabelOptions],
        vendor: str = "auto",
        nvml: Any | None = None,
        dry_run: bool = False,
        out: TextIO | None = None,
        metrics: LabellerMetrics | None = None,
    ) -> None:
        self.host_root = host_root
        self.node_name = node_name
        self.api = api
        self.options = options
        self.vendor = vendor
        self.nvml = nvml
        self.dry_run = dry_run
        self.out = out
        self.metrics = metrics or LabellerMetrics()
        self._backends: list[GpuBackend] | None = None
        self._last_count: int | None = None
        self._last_printed: list[str] | None = None

    # GPUs ----------------------------------------------------------------------------------------
    def invalidate(self) -> None:
        """Hardware changed (udev event): reopen the backends before the next read."""
        self._close_backends()

    def _close_backends(self) -> None:
        for backend in self._backends or []:
            try:
                backend.close()
            except GpuBackendError as exc:
                log.warning("closing GPU backend failed", extra={"error": str(exc)})
        self._backends = None

    def _enumerate(self) -> list[GpuDevice]:
        if self._backends is None:
            self._backends = open_backends(self.host_root, self.vendor, nvml=self.nvml)
        try:
            return [gpu for backend in self._backends for gpu in backend.enumerate()]
        except Exception:
            # A stale driver handle (driver reloaded) fails here; the next pass starts fresh.
            self._close_backends()
            raise

    def read_gpus(self) -> list[GpuDevice]:
        gpus = self._enumerate()
        if self._last_count is not None and len(gpus) < self._last_count:
            # Fewer GPUs than last time: a vanished GPU, or driver handles that went stale in a
            # reload nobody told us about (NVML skips such devices). Only fresh handles can tell.
            self._close_backends()
            gpus = self._enumerate()
        self._last_count = len(gpus)
        return gpus

    # one pass ------------------------------------------------------------------------------------
    def run_once(self) -> PassResult:
        try:
            result = self._pass()
        except Exception:
            self.metrics.passes.labels(result="failed").inc()
            raise
        self.metrics.passes.labels(result="ok").inc()
        if result.written:
            self.metrics.patches.inc()
        self.metrics.labels.set(len(result.labels))
        return result

    def _pass(self) -> PassResult:
        gpus = self.read_gpus()
        self.metrics.gpus.set(len(gpus))
        labels = labels_for(gpus, self.options())
        if self.api is None:
            # Only in --dry-run without cluster access or node name: show everything as new.
            plan, written = plan_labels({}, {}, labels), False
        else:
            plan, written = sync_node_labels(self.api, self.node_name, labels, dry_run=self.dry_run)
        if self.dry_run:
            self._print(plan)
        return PassResult(labels, plan, written)

    def _print(self, plan: LabelPlan) -> None:
        lines = describe(plan)
        if self.out is None or lines == self._last_printed:
            return
        self._last_printed = lines
        header = f"node {self.node_name or '(unnamed)'}: "
        header += f"{len(lines)} label change(s)" if lines else "labels up to date"
        self.out.write("\n".join([header, *lines]) + "\n")
        self.out.flush()

    def close(self) -> None:
        self._close_backends()
