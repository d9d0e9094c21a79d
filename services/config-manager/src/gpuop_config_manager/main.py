"""`gpuop-config-manager`: wiring of settings, the hot-reloaded profiles file and the pass loop."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from gpuop_common.config.config_manager import ConfigManagerConfig
from gpuop_common.configfile import ConfigFileWatcher
from gpuop_common.gpu.amd_drm import AMD_VENDOR_ID
from gpuop_common.gpu.amd_reload import DriverReloader
from gpuop_common.gpu.amd_smi import partition_writer
from gpuop_common.gpu.detect import pci_gpu_addresses
from gpuop_common.gpu.hostcmd import HostCommands, host_exec_argv
from gpuop_common.kube import KubeConfigError, make_api_client
from gpuop_common.shutdown import ServiceContext, run_service

from gpuop_config_manager.agent import ConfigManagerAgent
from gpuop_config_manager.gpus import NodeGpus
from gpuop_config_manager.kubeio import NodeClient
from gpuop_config_manager.labels import State
from gpuop_config_manager.metrics import ConfigManagerMetrics
from gpuop_config_manager.settings import ConfigManagerSettings

log = logging.getLogger(__name__)

SERVICE = "config-manager"
CONFIG_POLL_SECONDS = 5.0
AMD_SMI_TIMEOUT_S = 600.0  # one `amd-smi set`: a memory partition may reload the driver inside it


def serve(ctx: ServiceContext[ConfigManagerSettings], metrics: ConfigManagerMetrics | None = None) -> int:
    s = ctx.settings
    if not s.node_name:
        log.error("no node name: set --node-name or NODE_NAME (the downward API's spec.nodeName)")
        return 2
    try:
        api = make_api_client(s.kubeconfig)
    except KubeConfigError as exc:
        log.error("cannot reach the Kubernetes API", extra={"error": str(exc)})
        return 1
    watcher: ConfigFileWatcher[ConfigManagerConfig] | None = None
    if s.config_file is not None:
        watcher = ConfigFileWatcher(
            s.config_file,
            ConfigManagerConfig,
            lambda _config: None,
            interval=CONFIG_POLL_SECONDS,
            default=ConfigManagerConfig(),
            optional=True,
            node_name=s.node_name,
        )
        watcher.load_initial()
        if not s.once:
            watcher.start_in_thread(ctx.stopping)

    def config() -> ConfigManagerConfig:
        return watcher.config if watcher is not None else ConfigManagerConfig()

    host_prefix = tuple(host_exec_argv(s.host_exec, str(s.host_root)))
    reloader = DriverReloader(host_prefix) if s.driver_reload else None
    amd_writer = None
    if s.vendor != "nvidia" and pci_gpu_addresses(s.host_root, AMD_VENDOR_ID):
        amd_writer, chosen = partition_writer(s.partition_tool, HostCommands(host_prefix, AMD_SMI_TIMEOUT_S))
        log.info(chosen, extra={"partition_tool": s.partition_tool})
    gpus = NodeGpus.open(s.host_root, s.vendor, reloader=reloader, amd_writer=amd_writer)
    agent = ConfigManagerAgent(
        kube=NodeClient(api, s.node_name, dry_run=s.dry_run),
        gpus=gpus,
        config=config,
        stopping=ctx.stopping,
        poll_seconds=s.poll_seconds,
        evict_gpu_pods=s.evict_gpu_pods,
        metrics=metrics,
    )
    try:
        return _loop(ctx, agent)
    finally:
        gpus.close()
        api.close()  # type: ignore[no-untyped-call]


def _loop(ctx: ServiceContext[ConfigManagerSettings], agent: ConfigManagerAgent) -> int:
    s = ctx.settings
    while not ctx.stopping.is_set():
        try:
            outcome = agent.run_once()
        except Exception as exc:
            log.exception("configuration pass failed")
            agent.metrics.passes.labels(result="error").inc()
            ctx.probes.set_ready(False, f"pass failed: {type(exc).__name__}")
            if s.once:
                return 1
        else:
            agent.metrics.passes.labels(result="ok").inc()
            ctx.probes.set_ready(True)
            if s.once:
                return 1 if outcome.state is State.FAILED else 0
        ctx.stopping.wait(s.interval)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    metrics = ConfigManagerMetrics()
    return run_service(
        ConfigManagerSettings,
        lambda ctx: serve(ctx, metrics=metrics),
        service=SERVICE,
        argv=argv,
        registry=metrics.registry,
    )


if __name__ == "__main__":
    raise SystemExit(main())
