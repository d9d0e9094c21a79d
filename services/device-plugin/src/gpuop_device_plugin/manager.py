"""Resource manager: the node's GPUs (through the gpuop_common backends) -> resources and health.

No gRPC here. `refresh()` reads the backends and returns a `ManagerState` computed by the pure
functions of `inventory` and `health`; the service publishes it to the per-resource endpoints.
Enumeration is the expensive read, so it runs at start, on request (udev event, config change,
periodic re-scan) and whenever a GPU's health reasons change (a vanished partition or a new
partition mode shows up in health first). Health itself is read on every call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuop_common.config import DevicePluginConfig
from gpuop_common.gpu import GpuBackend, GpuBackendError, GpuDevice, GpuHealth, NvmlBackend
from gpuop_common.gpu.changes import (
    changed_partition_modes,
    enumerate_all,
    health_all,
    health_reason_key,
    merge_inventory,
)

from gpuop_device_plugin.devices import UNHEALTHY, ResourcePlan
from gpuop_device_plugin.health import HealthVerdict, evaluate, uncorrectable_totals
from gpuop_device_plugin.inventory import build_plan
from gpuop_device_plugin.mps import daemon_ready

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ManagerState:
    plan: ResourcePlan
    verdict: HealthVerdict


class ResourceManager:
    def __init__(
        self, backends: Sequence[GpuBackend], config: DevicePluginConfig, host_root: Path = Path("/")
    ) -> None:
        self.backends = list(backends)
        self.host_root = Path(host_root)
        self._mps_ready = False
        self._config = config
        self._lock = threading.Lock()
        self._gpus: list[GpuDevice] = []
        self._plan = ResourcePlan({})
        self._sticky: set[str] = set()
        self._last_reasons: frozenset[tuple[str, str]] = frozenset()
        self._ras_baseline: dict[str, int] | None = None
        self._rescan = True
        self._apply_ignored_xids()

    @property
    def config(self) -> DevicePluginConfig:
        return self._config

    def set_config(self, config: DevicePluginConfig) -> None:
        with self._lock:
            self._config = config
            self._apply_ignored_xids()
            self._sticky.clear()  # a new policy starts from what the devices report now
            self._rescan = True

    def request_rescan(self) -> None:
        self._rescan = True

    def _apply_ignored_xids(self) -> None:
        for backend in self.backends:
            if isinstance(backend, NvmlBackend):
                backend.ignored_xids = frozenset(self._config.health.ignored_xids)

    def _enumerate(self) -> list[GpuDevice]:
        return enumerate_all(self.backends)

    def _health(self) -> list[GpuHealth]:
        # Leaving a failed vendor's GPUs out makes them Unhealthy (not reported = unknown).
        return health_all(self.backends)[0]

    def _ras_totals(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for backend in self.backends:
            try:
                totals.update(uncorrectable_totals(backend.telemetry()))
            except (GpuBackendError, OSError) as exc:
                log.warning("reading ECC counters failed", extra={"error": str(exc)})
        return totals

    def refresh(self) -> ManagerState:
        with self._lock:
            config = self._config
            reports = self._health()
            reasons = health_reason_key(reports)
            if reasons != self._last_reasons:
                self._rescan = True
            if config.sharing.mps is not None and self._mps_daemon_ready(config) != self._mps_ready:
                self._rescan = True  # the MPS daemon came up, went away or took new settings
            if self._rescan:
                self._rescan = False
                self._rescan_locked(config)
            self._last_reasons = reasons
            ras_current: dict[str, int] = {}
            threshold = config.health.ras_uncorrectable_threshold
            if threshold > 0 and (
                self._ras_baseline is None or any(c == "ras_uncorrectable_increase" for _, c in reasons)
            ):
                ras_current = self._ras_totals()
                if self._ras_baseline is None:
                    self._ras_baseline = dict(ras_current)
            verdict = evaluate(
                self._plan.all_devices(),
                reports,
                config.health,
                sticky=self._sticky,
                ras_baseline=self._ras_baseline,
                ras_current=ras_current,
            )
            self._sticky |= {dev for dev, state in verdict.states.items() if state == UNHEALTHY}
            return ManagerState(self._plan, verdict)

    def _rescan_locked(self, config: DevicePluginConfig) -> None:
        current = self._enumerate()
        changed_mode = changed_partition_modes(self._gpus, current)
        if changed_mode:
            log.info("partition mode changed; re-reading health baseline", extra={"gpus": changed_mode})
            for backend in self.backends:
                backend.reset_health()
        self._gpus = merge_inventory(self._gpus, current)
        self._mps_ready = self._mps_daemon_ready(config)
        plan = build_plan(self._gpus, config, mps_ready=self._mps_ready)
        for error in plan.errors:
            if error not in self._plan.errors:
                log.error("resource configuration problem", extra={"error": error})
        if plan.resources != self._plan.resources:
            log.info(
                "inventory",
                extra={"resources": {name: len(devs) for name, devs in plan.resources.items()}},
            )
        self._plan = plan

    def _mps_daemon_ready(self, config: DevicePluginConfig) -> bool:
        mps = config.sharing.mps
        return mps is not None and daemon_ready(self.host_root, self._gpus, mps)

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
