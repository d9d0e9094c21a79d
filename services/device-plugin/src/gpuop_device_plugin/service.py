"""The running plugin: one PluginServer per resource, kept in step with the resource manager.

`tick()` is one pass: refresh devices and health, start/stop endpoints for resources that appeared
or went away, publish the device lists (ListAndWatch sends only on change), write CDI specs, and
make every endpoint (re-)register with the kubelet when needed. `run()` ticks every
`health_interval` seconds, sooner on a udev event or a config change.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

from gpuop_common.config import DevicePluginConfig
from gpuop_common.gpu import Vendor
from gpuop_common.shutdown import Stopping

from gpuop_device_plugin.cdi import build_spec, write_spec
from gpuop_device_plugin.devices import socket_name
from gpuop_device_plugin.manager import ManagerState, ResourceManager
from gpuop_device_plugin.plugin import ResourceView
from gpuop_device_plugin.server import Endpoint, PluginServer

log = logging.getLogger(__name__)


class DevicePluginService:
    def __init__(
        self,
        manager: ResourceManager,
        socket_dir: Path,
        *,
        cdi_dir: Path,
        health_interval: float = 0.5,
    ) -> None:
        self.manager = manager
        self.socket_dir = Path(socket_dir)
        self.cdi_dir = Path(cdi_dir)
        self.health_interval = health_interval
        self.servers: dict[str, PluginServer] = {}
        self.state: ManagerState | None = None
        self._wake = threading.Event()
        self._last_rescan = time.monotonic()
        self._tick_lock = threading.Lock()

    def wake(self, rescan: bool = True) -> None:
        """Tick now (udev event, config change)."""
        if rescan:
            self.manager.request_rescan()
        self._wake.set()

    def apply_config(self, config: DevicePluginConfig) -> None:
        self.manager.set_config(config)
        self.wake()

    @property
    def registered(self) -> bool:
        """Every advertised resource is registered with the current kubelet."""
        return bool(self.servers) and all(server.registered for server in self.servers.values())

    def tick(self) -> ManagerState:
        with self._tick_lock:
            now = time.monotonic()
            if now - self._last_rescan >= self.manager.config.health.poll_interval_seconds:
                self._last_rescan = now
                self.manager.request_rescan()
            state = self.manager.refresh()
            self._sync(state)
            for server in self.servers.values():
                server.check()
            self.state = state
            return state

    def _sync(self, state: ManagerState) -> None:
        plan, config = state.plan, self.manager.config
        for name in sorted(set(self.servers) - set(plan.resources)):
            log.info("resource no longer advertised", extra={"resource": name})
            self.servers.pop(name).stop()
        for name, devices in plan.resources.items():
            server = self.servers.get(name)
            if server is None:
                vendor = devices[0].vendor
                endpoint = Endpoint(name, self.socket_dir, socket_name(name, vendor))
                server = self.servers[name] = PluginServer(endpoint, ResourceView(name))
            changed = server.view.publish(
                devices,
                state.verdict.states,
                shared=name in plan.shared,
                fail_requests_greater_than_one=plan.fail_requests_greater_than_one,
                cdi=config.cdi,
                mps=plan.mps.get(name),
            )
            if changed:
                unhealthy = [d.id for d in devices if state.verdict.states.get(d.id) != "Healthy"]
                log.info(
                    "device list changed",
                    extra={
                        "resource": name,
                        "devices": len(devices),
                        "unhealthy": unhealthy,
                        "reasons": {
                            dev: [r.message for r in state.verdict.reasons.get(dev, ())] for dev in unhealthy
                        },
                    },
                )
        # With CDI off the specs are emptied, which removes our files: stale names must not resolve.
        devices_all = plan.all_devices() if config.cdi else []
        for vendor in (Vendor.AMD, Vendor.NVIDIA):
            write_spec(self.cdi_dir, vendor, build_spec(vendor, devices_all))

    def run(self, stopping: Stopping) -> None:
        while not stopping.is_set():
            try:
                self.tick()
            except Exception:
                # One bad read must not end the plugin: the kubelet would lose every device.
                log.exception("device plugin tick failed")
            self._wake.wait(self.health_interval)
            self._wake.clear()

    def start_in_thread(self, stopping: Stopping) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stopping,), name="gpuop-device-plugin", daemon=True)
        thread.start()
        return thread

    def stop(self) -> None:
        """Stop every endpoint and remove its socket (SIGTERM)."""
        with self._tick_lock:
            for server in self.servers.values():
                server.stop()
            self.servers.clear()
