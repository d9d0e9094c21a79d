"""The node's DRA devices, read from the gpuop_common backends the way the device plugin reads them.

Health is read on every `refresh()`; enumeration (the expensive read) only at start, on request,
every `rescan_interval` seconds (a partition change the health baseline does not show) and when the
set of health reasons changes. A changed partition mode re-takes the backends' health
baseline, as the device plugin does, so the new partitions do not read as vanished ones.

Each refresh also leaves the health of every known device (`health()`), for the kubelet's health
stream; the devices it returns, and that the slice publishes, are the present healthy ones of it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from gpuop_common.config.sharing import Sharing
from gpuop_common.gpu import GpuBackend, GpuDevice, GpuHealth
from gpuop_common.gpu.changes import (
    ReasonKey,
    changed_partition_modes,
    enumerate_all,
    health_all,
    health_reason_key,
)

from gpuop_dra_driver.devices import DraDevice
from gpuop_dra_driver.health import DeviceHealthState, device_health, healthy_devices, known_gpus

log = logging.getLogger(__name__)


class Inventory:
    def __init__(
        self, backends: Sequence[GpuBackend], rescan_interval: float = 30.0, sharing: Sharing | None = None
    ) -> None:
        self.backends = list(backends)
        self.rescan_interval = rescan_interval
        self._sharing = sharing or Sharing()
        self._scanned_at = 0.0
        self._lock = threading.Lock()
        self._gpus: list[GpuDevice] = []
        self._known: list[GpuDevice] = []  # _gpus and what vanished but is still reported
        self._devices: dict[str, DraDevice] = {}
        self._health: list[DeviceHealthState] = []
        self._reasons: ReasonKey | None = None
        self._rescan = True

    def request_rescan(self) -> None:
        self._rescan = True

    def set_sharing(self, sharing: Sharing) -> None:
        """Publish time-sliced devices per `sharing` from the next refresh on (a config reload)."""
        with self._lock:
            self._sharing = sharing

    def devices(self) -> dict[str, DraDevice]:
        """Device name -> device, as of the last refresh."""
        with self._lock:
            return dict(self._devices)

    def health(self) -> list[DeviceHealthState]:
        """Every known device's health, as of the last refresh, sorted by device name."""
        with self._lock:
            return list(self._health)

    def _read_health(self) -> tuple[list[GpuHealth], set[str]]:
        return health_all(self.backends)

    def _enumerate(self) -> list[GpuDevice]:
        return enumerate_all(self.backends)

    def refresh(self) -> list[DraDevice]:
        """Re-read health (and the GPUs when needed); the healthy devices, sorted by name."""
        with self._lock:
            reports, failed = self._read_health()
            reasons = health_reason_key(reports)
            due = time.monotonic() - self._scanned_at >= self.rescan_interval
            if self._rescan or due or reasons != self._reasons:
                self._rescan = False
                self._scanned_at = time.monotonic()
                gpus = self._enumerate()
                changed = changed_partition_modes(self._gpus, gpus)
                if changed:
                    log.info("partition mode changed; re-reading health baseline", extra={"gpus": changed})
                    for backend in self.backends:
                        backend.reset_health()
                    reports, failed = self._read_health()
                    reasons = health_reason_key(reports)
                self._gpus = gpus
            self._reasons = reasons
            self._known = known_gpus(self._known, self._gpus, reports, failed)
            # A vendor whose health cannot be read publishes nothing: its devices are Unknown.
            self._health = device_health(self._known, reports, failed, self._sharing)
            devices = healthy_devices(self._gpus, self._health, self._sharing)
            self._devices = {d.name: d for d in devices}
            return devices

    def close(self) -> None:
        for backend in self.backends:
            backend.close()
