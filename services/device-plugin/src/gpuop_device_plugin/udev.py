"""udev events (pyudev) as a hint to re-read the GPUs at once instead of at the next poll.

Optional by design: inside a container without the host's netlink socket, or with no libudev, the
monitor cannot start; the short health poll then still catches every change (only a little later).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

SUBSYSTEMS = ("drm", "kfd", "pci")


class UdevWatcher:
    """Calls `on_event()` for every add/remove/change uevent of a GPU-related subsystem."""

    def __init__(self, on_event: Callable[[], None]) -> None:
        self._on_event = on_event
        self._observer: Any = None

    def start(self) -> bool:
        try:
            import pyudev

            context = pyudev.Context()
            monitor = pyudev.Monitor.from_netlink(context)
            for subsystem in SUBSYSTEMS:
                monitor.filter_by(subsystem)
            self._observer = pyudev.MonitorObserver(monitor, callback=self._handle, name="gpuop-udev")
            self._observer.daemon = True
            self._observer.start()
        except Exception as exc:  # ImportError, OSError from libudev/netlink: both mean "poll only"
            log.info("udev events unavailable; relying on polling", extra={"error": str(exc)})
            self._observer = None
            return False
        log.info("watching udev events", extra={"subsystems": list(SUBSYSTEMS)})
        return True

    def _handle(self, device: Any) -> None:
        log.debug("udev event", extra={"action": getattr(device, "action", None), "path": str(device)})
        self._on_event()

    def stop(self) -> None:
        if self._observer is not None:
            self._observer.stop()
            self._observer = None
