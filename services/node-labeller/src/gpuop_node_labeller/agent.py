"""One labelling pass: read the node's GPUs, compute the labels and the `GPUHealthy` condition, bring
the Node to them (a metadata PATCH, a `nodes/status` PATCH, each only when something differs).

The GPU backends are kept open between passes (NVML init is not free) and reopened after a hardware
event, a backend failure, or a pass that sees fewer GPUs than the last one: that is what a driver
reload or a vanished device looks like. Health is read from a second set of backends that is kept
through all of that, because health is relative to the baseline a backend took when it first looked
(a vanished GPU is only "vanished" to a backend that saw it): they are reopened only when their health
read fails, or when the Node's `gpuop.dev/gpu-health-reset` annotation changes (the operator sets it
after a GPU reset, so that sticky failures such as NVIDIA XIDs are forgotten).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gpuop_common.gpu import GpuBackend, GpuBackendError, GpuDevice, GpuHealth, open_backends
from gpuop_common.kubejson import MERGE_PATCH, NODES, STRATEGIC_MERGE_PATCH, KubeJson
from gpuop_common.retry import kube_retry
from kubernetes import client

from gpuop_node_labeller.health import (
    GpuCondition,
    condition_patch,
    gpu_condition,
    now_rfc3339,
    unreadable_condition,
)
from gpuop_node_labeller.labels import LabelOptions, labels_for
from gpuop_node_labeller.metrics import LabellerMetrics
from gpuop_node_labeller.ownership import LabelPlan, describe, plan_labels

log = logging.getLogger(__name__)

# The client waits forever by default; a wedged connection must fail the pass and be retried instead.
REQUEST_TIMEOUT_S = 15.0
# Set (to any new value) by whoever reset a GPU: the labeller then re-takes its health baseline.
HEALTH_RESET_ANNOTATION = "gpuop.dev/gpu-health-reset"
GONE_CODES = frozenset({"device_lost", "gpu_vanished"})


@dataclass(frozen=True)
class PassResult:
    labels: dict[str, str]
    plan: LabelPlan
    written: bool  # a label PATCH was sent
    condition: GpuCondition | None = None
    condition_written: bool = False  # a nodes/status PATCH was sent


@dataclass(frozen=True)
class SyncResult:
    plan: LabelPlan
    written: bool
    condition: GpuCondition | None
    condition_written: bool


@kube_retry()
def sync_node(
    api: client.ApiClient,
    node_name: str,
    desired: dict[str, str],
    condition: Callable[[dict[str, Any]], GpuCondition] | None = None,
    *,
    dry_run: bool = False,
) -> SyncResult:
    """Read the Node once; send a label merge PATCH and a `GPUHealthy` status PATCH where they differ.

    `condition(node)` gives the wanted condition (None: leave it alone). The whole read-plan-write is
    retried, so a 409 (someone changed the Node since our read) is resolved by planning again against
    the fresh Node; the status patch touches only our condition, so it never conflicts.
    """
    kube = KubeJson(api, REQUEST_TIMEOUT_S)
    node = kube.get(NODES, node_name)
    meta = node.get("metadata") or {}
    plan = plan_labels(meta.get("labels"), meta.get("annotations"), desired)
    wanted = condition(node) if condition is not None else None
    status_patch = condition_patch(node, wanted, now_rfc3339()) if wanted is not None else None
    written = condition_written = False
    if not plan.empty and not dry_run:
        kube.patch(NODES, node_name, plan.patch(meta.get("resourceVersion")), content_type=MERGE_PATCH)
        written = True
        log.info(
            "node labels updated",
            extra={"node_name": node_name, "set": plan.set, "removed": list(plan.removed)},
        )
    if status_patch is not None and wanted is not None and not dry_run:
        kube.patch(NODES, node_name, status_patch, sub="status", content_type=STRATEGIC_MERGE_PATCH)
        condition_written = True
        log.log(
            logging.WARNING if wanted.status != "True" else logging.INFO,
            "GPUHealthy condition updated",
            extra={
                "node_name": node_name,
                "status": wanted.status,
                "reason": wanted.reason,
                "why": wanted.message,
            },
        )
    return SyncResult(plan, written, wanted, condition_written)


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
        self._health_backends: list[GpuBackend] | None = None
        self._health_reset: str | None = None  # the HEALTH_RESET_ANNOTATION value last acted on
        self._pci: dict[str, str] = {}  # GPU id -> PCI address, kept for GPUs that vanish
        self._seen: set[str] = set()  # GPU ids the last read_gpus() found
        self._modes: dict[str, str | None] = {}  # GPU id -> partition mode key, last seen
        self._last_count: int | None = None
        self._last_printed: list[str] | None = None

    # GPUs ----------------------------------------------------------------------------------------
    def invalidate(self) -> None:
        """Hardware changed (udev event): reopen the backends before the next read."""
        self._close_backends()

    def _close_backends(self) -> None:
        _close(self._backends or [])
        self._backends = None

    # health --------------------------------------------------------------------------------------
    def _close_health(self) -> None:
        _close(self._health_backends or [])
        self._health_backends = None

    def health_condition(self, node: dict[str, Any]) -> GpuCondition:
        """The wanted `GPUHealthy` for this Node (its annotations say whether to re-take the baseline)."""
        annotations = (node.get("metadata") or {}).get("annotations") or {}
        token = annotations.get(HEALTH_RESET_ANNOTATION)
        if token != self._health_reset:
            if self._health_reset is not None or (token is not None and self._health_backends is not None):
                log.info("GPU reset announced: re-taking the health baseline", extra={"token": token})
                self._close_health()
            self._health_reset = token
        try:
            reports = self._read_health()
            if _gone(reports) & self._seen:
                # "Lost" GPUs that fresh handles still enumerate: the health handles went stale in a
                # driver reload nobody told us about (see read_gpus); only fresh ones can tell.
                self._close_health()
                reports = self._read_health()
        except (GpuBackendError, OSError) as exc:
            log.warning("GPU health unreadable", extra={"error": str(exc)})
            self._close_health()
            return unreadable_condition(str(exc))
        wanted = gpu_condition(reports, self._pci)
        self.metrics.unhealthy.set(len(wanted.unhealthy))
        return wanted

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
        self._pci.update({gpu.id: gpu.pci_address for gpu in gpus if gpu.pci_address})
        self._seen = {gpu.id for gpu in gpus}
        modes = {gpu.id: gpu.partition.key if gpu.partition else None for gpu in gpus}
        switched = sorted(
            gid for gid, mode in modes.items() if gid in self._modes and self._modes[gid] != mode
        )
        if switched:
            # A partition switch (config manager) replaces the partitions a health baseline knows:
            # not a fault, so the baseline is taken again, as the device plugin does.
            log.info("partition mode changed; re-taking the health baseline", extra={"gpus": switched})
            self._close_health()
        self._modes.update(modes)
        return gpus

    def _read_health(self) -> list[GpuHealth]:
        if self._health_backends is None:
            self._health_backends = open_backends(self.host_root, self.vendor, nvml=self.nvml)
        return [h for backend in self._health_backends for h in backend.health()]

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
        if result.condition_written:
            self.metrics.condition_patches.inc()
        self.metrics.labels.set(len(result.labels))
        return result

    def _pass(self) -> PassResult:
        gpus = self.read_gpus()
        self.metrics.gpus.set(len(gpus))
        labels = labels_for(gpus, self.options())
        if self.api is None:
            # Only in --dry-run without cluster access or node name: show everything as new.
            plan = plan_labels({}, {}, labels)
            condition = self.health_condition({})
            result = SyncResult(plan, False, condition, False)
        else:
            result = sync_node(self.api, self.node_name, labels, self.health_condition, dry_run=self.dry_run)
        if self.dry_run:
            self._print(result.plan, result.condition)
        return PassResult(labels, result.plan, result.written, result.condition, result.condition_written)

    def _print(self, plan: LabelPlan, condition: GpuCondition | None = None) -> None:
        lines = describe(plan)
        extra = (
            []
            if condition is None
            else [f"GPUHealthy={condition.status} {condition.reason}: {condition.message}"]
        )
        if self.out is None or lines + extra == self._last_printed:
            return
        self._last_printed = lines + extra
        header = f"node {self.node_name or '(unnamed)'}: "
        header += f"{len(lines)} label change(s)" if lines else "labels up to date"
        self.out.write("\n".join([header, *lines, *extra]) + "\n")
        self.out.flush()

    def close(self) -> None:
        self._close_backends()
        self._close_health()


def _gone(reports: list[GpuHealth]) -> set[str]:
    return {h.gpu_id for h in reports if any(r.code in GONE_CODES for r in h.reasons)}


def _close(backends: list[GpuBackend]) -> None:
    for backend in backends:
        try:
            backend.close()
        except GpuBackendError as exc:
            log.warning("closing GPU backend failed", extra={"error": str(exc)})
