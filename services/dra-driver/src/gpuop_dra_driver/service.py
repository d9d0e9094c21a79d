"""Keeps the pieces in step: sockets served, devices read, health streamed, ResourceSlices current.

Each pass re-reads health (cheap), re-enumerates when health changed, hands every device's health
to the kubelet's health streams, and publishes when the device set differs from the last
successful publish, or every `resync` seconds so a slice deleted behind our back (the kubelet
does so 30 s after losing us) comes back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from gpuop_common.shutdown import Stopping
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpuop_dra_driver.devices import DraDevice
from gpuop_dra_driver.health import Health
from gpuop_dra_driver.inventory import Inventory
from gpuop_dra_driver.publisher import SlicePublisher
from gpuop_dra_driver.server import PluginSockets

log = logging.getLogger(__name__)


class DriverService:
    def __init__(
        self,
        inventory: Inventory,
        sockets: PluginSockets,
        publisher: SlicePublisher | None,
        *,
        interval: float = 1.0,
        resync: float = 60.0,
    ) -> None:
        self.inventory = inventory
        self.sockets = sockets
        self.publisher = publisher
        self.interval = interval
        self.resync = resync
        self._published: Sequence[DraDevice] | None = None
        self._published_at = 0.0
        self.publish_error: str | None = None
        self._wake = threading.Event()

    def wake(self) -> None:
        """Re-enumerate and publish now (a udev event, a test)."""
        self.inventory.request_rescan()
        self._wake.set()

    def tick(self) -> None:
        self.sockets.check()
        devices = self.inventory.refresh()
        health = self.inventory.health()
        if self.sockets.health.update(health):
            bad = {s.device: s.message for s in health if s.health is not Health.HEALTHY}
            log.info("device health changed", extra={"devices": len(health), "not_healthy": bad})
        if self.publisher is None:
            return
        due = time.monotonic() - self._published_at >= self.resync
        if self._published is not None and list(devices) == list(self._published) and not due:
            return
        try:
            self.publisher.publish(devices)
        except (ApiException, HTTPError, OSError) as exc:
            self.publish_error = str(exc)[:500]
            log.error("publishing ResourceSlices failed; retrying", extra={"error": self.publish_error})
            return
        self.publish_error = None
        self._published = list(devices)
        self._published_at = time.monotonic()

    def run(self, stopping: Stopping) -> None:
        while not stopping:
            try:
                self.tick()
            except Exception:  # one bad pass must not end the plugin
                log.exception("driver pass failed")
            self._wake.wait(self.interval)
            self._wake.clear()
            if stopping.wait(0):
                break

    def start_in_thread(self, stopping: Stopping) -> threading.Thread:
        self.sockets.start()
        thread = threading.Thread(target=self.run, args=(stopping,), name="dra-driver", daemon=True)
        thread.start()
        return thread
