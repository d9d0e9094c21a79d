"""gpuop-device-plugin: advertise a node's AMD and NVIDIA GPUs to the kubelet.

Thin wiring: settings -> GPU backends (gpuop_common.gpu) -> resource manager -> one kubelet
endpoint per resource; the ConfigMap file is hot-reloaded; SIGTERM removes our sockets.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from gpuop_common.config import DevicePluginConfig
from gpuop_common.configfile import ConfigFileWatcher
from gpuop_common.gpu import GpuBackendError, open_backends
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.settings import ConfigFileAgentSettings
from gpuop_common.shutdown import ServiceContext, run_service
from pydantic import Field

from gpuop_device_plugin.manager import ResourceManager
from gpuop_device_plugin.service import DevicePluginService
from gpuop_device_plugin.udev import UdevWatcher

log = logging.getLogger(__name__)

SERVICE = "device-plugin"


class DevicePluginSettings(ConfigFileAgentSettings):
    socket_dir: Path = Field(
        Path(dp.DEVICE_PLUGIN_PATH),
        description="Kubelet device-plugins directory: our sockets go here, kubelet.sock is in it.",
    )
    cdi_spec_dir: Path = Field(
        Path("/var/run/cdi"), description="Where CDI specs are written when CDI is on."
    )
    health_interval: float = Field(
        0.5,
        gt=0,
        le=60,
        description="Seconds between health checks (also how soon kubelet restarts are seen).",
    )
    vendor: Literal["auto", "amd", "nvidia"] = Field("auto", description="GPU vendor(s) to advertise.")
    udev: bool = Field(True, description="React to udev events at once (needs the host's netlink).")


def serve(ctx: ServiceContext[DevicePluginSettings]) -> int:
    s = ctx.settings
    if not s.socket_dir.is_dir():
        log.error("kubelet device-plugins directory does not exist", extra={"socket_dir": str(s.socket_dir)})
        return 1
    try:
        backends = open_backends(s.host_root, s.vendor)
    except GpuBackendError as exc:
        log.error("cannot open GPU backends", extra={"host_root": str(s.host_root), "error": str(exc)})
        return 1
    if not backends:
        log.warning("no GPUs found; advertising nothing", extra={"host_root": str(s.host_root)})
    watcher = ConfigFileWatcher.load(
        s.config_file, DevicePluginConfig, interval=s.config_poll_interval, node_name=s.node_name
    )
    manager = ResourceManager(backends, watcher.config, host_root=s.host_root)
    service = DevicePluginService(
        manager, s.socket_dir, cdi_dir=s.cdi_spec_dir, health_interval=s.health_interval
    )
    watcher.set_on_change(service.apply_config)
    udev = UdevWatcher(service.wake)
    if s.udev:
        udev.start()
    ctx.probes.add_readiness_check("registered", lambda: service.registered or not service.servers)
    ctx.probes.add_readiness_check("config", lambda: watcher.error is None)
    try:
        service.tick()
        if s.once:
            return 0 if service.registered or not service.servers else 1
        watcher.start_in_thread(ctx.stopping)
        ctx.probes.set_ready(True)
        service.run(ctx.stopping)
    finally:
        udev.stop()
        service.stop()
        manager.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(DevicePluginSettings, serve, service=SERVICE, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
