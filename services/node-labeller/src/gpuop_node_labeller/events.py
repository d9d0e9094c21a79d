"""Wake-ups for the labelling loop: udev hardware events, config changes, and the periodic resync.

udev (through pyudev) is an optimisation: when it is unavailable (no libudev, no netlink in the pod's
network namespace) the periodic resync still converges, only later. Events arrive in bursts (one
per DRM node when 8 GPUs switch to CPX), so the loop waits for a short quiet time before relabelling.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from gpuop_common.shutdown import Stopping

log = logging.getLogger(__name__)

GPU_PCI_VENDORS = ("1002", "10DE")
GPU_MODULES = frozenset({"amdgpu", "nvidia"})
SUBSYSTEMS = ("drm", "pci", "module")
UDEV_CONTROL = Path("/run/udev/control")
MAX_SETTLE_ROUNDS = 10


def relevant(action: str | None, subsystem: str | None, name: str, properties: Mapping[str, str]) -> bool:
    """Does this uevent change what the labeller sees? DRM nodes (partition switch, driver bind),
    GPU PCI functions (hot-unplug, reset) and the GPU kernel modules (driver reload)."""
    if subsystem == "drm":
        return True
    if subsystem == "pci":
        return properties.get("PCI_ID", "").upper().startswith(GPU_PCI_VENDORS)
    if subsystem == "module":
        return name in GPU_MODULES and action in ("add", "remove")
    return False


class Trigger:
    """A wake-up flag the loop waits on: set by events, config changes and stopping."""

    def __init__(self, stopping: Stopping) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reasons: list[str] = []
        self._stopping = stopping
        threading.Thread(target=self._wake_on_stop, name="gpuop-labeller-stop", daemon=True).start()

    def _wake_on_stop(self) -> None:
        self._stopping.wait()
        self._event.set()

    def fire(self, reason: str) -> None:
        with self._lock:
            self._reasons.append(reason)
        self._event.set()

    def wait(self, timeout: float, settle: float = 0.0) -> list[str]:
        """Block until fired, stopping or `timeout`; after a fire, wait until `settle` s pass quietly.

        Returns the reasons collected (empty: the timeout ran out, a periodic resync is due).
        """
        self._event.wait(timeout)
        # A device that keeps flapping must not postpone the pass forever: settle for a bounded time.
        deadline = time.monotonic() + settle * MAX_SETTLE_ROUNDS
        while settle > 0 and self._event.is_set() and not self._stopping.is_set():
            self._event.clear()
            if not self._event.wait(settle) or time.monotonic() >= deadline:
                break
        self._event.clear()
        with self._lock:
            reasons, self._reasons = self._reasons, []
        return reasons


class EventSource(Protocol):
    def start(self, fire: Callable[[str], None]) -> bool: ...

    def stop(self) -> None: ...


class UdevEvents:
    """Kernel/udev events from pyudev's netlink monitor, filtered by `relevant`."""

    def __init__(self) -> None:
        self._observer: Any = None

    def start(self, fire: Callable[[str], None]) -> bool:
        try:
            import pyudev

            # Without the host's udevd in reach (a pod without /run/udev), listen to raw kernel uevents.
            source = "udev" if UDEV_CONTROL.exists() else "kernel"
            monitor = pyudev.Monitor.from_netlink(pyudev.Context(), source=source)
            for subsystem in SUBSYSTEMS:
                monitor.filter_by(subsystem)

            def on_event(device: Any) -> None:
                properties = {str(k): str(v) for k, v in device.properties.items()}
                if relevant(device.action, device.subsystem, str(device.sys_name), properties):
                    fire(f"udev {device.action} {device.subsystem} {device.sys_name}")

            observer = pyudev.MonitorObserver(monitor, callback=on_event, name="gpuop-udev")
            observer.daemon = True
            observer.start()
        except Exception as exc:  # ImportError (no libudev), OSError (netlink refused), ...
            log.warning(
                "udev events unavailable, relying on the periodic resync",
                extra={"error": f"{type(exc).__name__}: {exc}"},
            )
            return False
        self._observer = observer
        log.info("watching udev events", extra={"subsystems": list(SUBSYSTEMS), "source": source})
        return True

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.send_stop()
            self._observer = None
