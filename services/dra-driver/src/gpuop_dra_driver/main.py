"""gpuop-dra-driver: the `gpu.gpuop.dev` DRA kubelet plugin and ResourceSlice publisher for one node.

Thin wiring: settings -> GPU backends (gpuop_common.gpu) -> inventory -> driver (prepare/unprepare,
checkpoint, CDI) -> sockets (registration, DRAPlugin, the health stream) and the slice publisher;
SIGTERM removes our sockets (the slices stay: the kubelet drops them if no instance comes back
within 30 s).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from gpuop_common.config import DraDriverConfig
from gpuop_common.configfile import ConfigFileWatcher
from gpuop_common.gpu import GpuBackendError, open_backends
from gpuop_common.gpu.cdi import DEFAULT_CDI_DIR
from gpuop_common.kube import KubeConfigError, make_api_client
from gpuop_common.kubejson import KubeJson
from gpuop_common.kubelet import SocketPathTooLongError, dra
from gpuop_common.kubelet import pluginregistration as reg
from gpuop_common.settings import ConfigFileAgentSettings
from gpuop_common.shutdown import ServiceContext, run_service
from pydantic import Field

from gpuop_dra_driver import DRIVER_NAME
from gpuop_dra_driver.checkpoint import Checkpoint
from gpuop_dra_driver.driver import DraDriver, api_claim_reader
from gpuop_dra_driver.healthfeed import HealthFeed, health_timeout_s
from gpuop_dra_driver.inventory import Inventory
from gpuop_dra_driver.publisher import SlicePublisher
from gpuop_dra_driver.server import PluginSockets
from gpuop_dra_driver.service import DriverService

log = logging.getLogger(__name__)

SERVICE = "dra-driver"


class DraDriverSettings(ConfigFileAgentSettings):
    plugins_dir: Path = Field(
        Path(dra.PLUGINS_DIR),
        description="Kubelet plugins directory; our socket and checkpoint go in <driver>/.",
    )
    registry_dir: Path = Field(
        Path(reg.PLUGINS_REGISTRY_DIR), description="Kubelet plugin-registration directory."
    )
    cdi_spec_dir: Path = Field(DEFAULT_CDI_DIR, description="Where the per-claim CDI specs are written.")
    interval: float = Field(1.0, gt=0, le=60, description="Seconds between health checks of the GPUs.")
    rescan_interval: float = Field(
        30.0, gt=0, description="Seconds between full GPU re-enumerations (partition changes)."
    )
    resync: float = Field(60.0, gt=0, description="Seconds between full re-publishes of the ResourceSlices.")
    vendor: Literal["auto", "amd", "nvidia"] = Field("auto", description="GPU vendor(s) to publish.")


def serve(ctx: ServiceContext[DraDriverSettings]) -> int:
    s = ctx.settings
    if not s.node_name:
        log.error("node name unknown: set --node-name or NODE_NAME (the downward API's spec.nodeName)")
        return 1
    # The kubelet watches the registry dir; without it nobody would ever call us. The plugins dir is
    # ours to create (<plugins>/gpu.gpuop.dev/), as the chart's DirectoryOrCreate volume does.
    if not s.registry_dir.is_dir():
        log.error("kubelet plugin-registration directory does not exist", extra={"path": str(s.registry_dir)})
        return 1
    try:
        backends = open_backends(s.host_root, s.vendor)
        api = KubeJson(make_api_client(s.kubeconfig))
    except (GpuBackendError, KubeConfigError) as exc:
        log.error("cannot start", extra={"host_root": str(s.host_root), "error": str(exc)})
        return 1
    if not backends:
        log.warning("no GPUs found; publishing an empty pool", extra={"host_root": str(s.host_root)})
    # The draDriver section of the DeviceConfig (the chart's ConfigMap), as the device plugin reads
    # devicePlugin: a sharing change is published at the next refresh, without a restart.
    watcher = ConfigFileWatcher.load(
        s.config_file, DraDriverConfig, interval=s.config_poll_interval, node_name=s.node_name
    )
    inventory = Inventory(backends, s.rescan_interval, sharing=watcher.config.sharing.as_sharing())
    watcher.set_on_change(lambda config: inventory.set_sharing(config.sharing.as_sharing()))
    inventory.refresh()
    driver = DraDriver(
        driver=DRIVER_NAME,
        node=s.node_name,
        cdi_dir=s.cdi_spec_dir,
        checkpoint=Checkpoint(s.plugins_dir / DRIVER_NAME / "checkpoint.json"),
        read_claim=api_claim_reader(api),
        devices=inventory.devices,
    )
    sockets = PluginSockets(driver, s.plugins_dir, s.registry_dir, HealthFeed(health_timeout_s(s.interval)))
    service = DriverService(
        inventory,
        sockets,
        None if s.dry_run else SlicePublisher(api, s.node_name, DRIVER_NAME),
        interval=s.interval,
        resync=s.resync,
    )
    ctx.probes.add_readiness_check("registered", lambda: sockets.registered)
    ctx.probes.add_readiness_check("slices", lambda: service.publish_error is None)
    ctx.probes.add_readiness_check("config", lambda: watcher.error is None)
    try:
        try:
            sockets.start()
        except (SocketPathTooLongError, OSError) as exc:  # too long, in use, a failed bind
            log.error("cannot serve the plugin sockets", extra={"error": str(exc)})
            return 1
        service.tick()
        if s.once:
            return 0 if service.publish_error is None else 1
        watcher.start_in_thread(ctx.stopping)
        ctx.probes.set_ready(True)
        service.run(ctx.stopping)
    finally:
        sockets.stop()
        inventory.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_service(DraDriverSettings, serve, service=SERVICE, argv=argv)


if __name__ == "__main__":
    sys.exit(main())
