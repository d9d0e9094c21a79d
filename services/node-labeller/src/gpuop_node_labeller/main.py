"""`gpuop-node-labeller`: wiring of settings, config reload, udev events and the labelling loop."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from gpuop_common.config.node_labeller import NodeLabellerConfig
from gpuop_common.configfile import ConfigFileWatcher
from gpuop_common.kube import KubeConfigError, make_api_client
from gpuop_common.shutdown import ServiceContext, run_service
from kubernetes import client

from gpuop_node_labeller.agent import NodeLabeller
from gpuop_node_labeller.events import EventSource, Trigger, UdevEvents
from gpuop_node_labeller.metrics import LabellerMetrics
from gpuop_node_labeller.options import LabelOptions
from gpuop_node_labeller.settings import LabellerSettings

log = logging.getLogger(__name__)

SERVICE = "node-labeller"
CONFIG_POLL_SECONDS = 5.0


class ConfigState:
    """The config in force: the ConfigMap file's content (hot-reloaded) or the defaults."""

    def __init__(self, settings: LabellerSettings, trigger: Trigger) -> None:
        self.settings = settings
        self.trigger = trigger
        self.watcher: ConfigFileWatcher[NodeLabellerConfig] | None = None
        if settings.config_file is not None:
            self.watcher = ConfigFileWatcher(
                settings.config_file,
                NodeLabellerConfig,
                lambda _config: trigger.fire("config changed"),
                interval=CONFIG_POLL_SECONDS,
                default=NodeLabellerConfig(),
                optional=True,
                node_name=settings.node_name,
            )

    def load_initial(self) -> None:
        """Read the file once before the first pass; that first read is not a change to react to."""
        if self.watcher is not None:
            self.watcher.load_initial()

    @property
    def config(self) -> NodeLabellerConfig:
        return self.watcher.config if self.watcher is not None else NodeLabellerConfig()

    def options(self) -> LabelOptions:
        return LabelOptions.from_config(
            self.config, mig_strategy=self.settings.mig_strategy, label_sets=self.settings.label_sets
        )

    def interval(self) -> float:
        # An explicit --interval (or GPUOP_INTERVAL) wins; otherwise the hot-reloaded config decides.
        if "interval" in self.settings.model_fields_set:
            return self.settings.interval
        return float(self.config.interval_seconds)


def _api(settings: LabellerSettings) -> client.ApiClient | None:
    if settings.dry_run and not settings.node_name:
        log.warning("dry run without a node name: showing every label as new")
        return None
    try:
        return make_api_client(settings.kubeconfig)
    except KubeConfigError as exc:
        if not settings.dry_run:
            raise
        log.warning("dry run without cluster access: showing every label as new", extra={"error": str(exc)})
        return None


def serve(
    ctx: ServiceContext[LabellerSettings],
    events: EventSource | None = None,
    metrics: LabellerMetrics | None = None,
) -> int:
    s = ctx.settings
    if not s.node_name and not s.dry_run:
        log.error("no node name: set --node-name or NODE_NAME (the downward API's spec.nodeName)")
        return 2
    try:
        api = _api(s)
    except KubeConfigError as exc:
        log.error("cannot reach the Kubernetes API", extra={"error": str(exc)})
        return 1
    trigger = Trigger(ctx.stopping)
    state = ConfigState(s, trigger)
    state.load_initial()
    if state.watcher is not None and not s.once:
        state.watcher.start_in_thread(ctx.stopping)
    source = events if events is not None else UdevEvents()
    watching = bool(s.udev and not s.once and source.start(trigger.fire))
    labeller = NodeLabeller(
        host_root=s.host_root,
        node_name=s.node_name,
        api=api,
        options=state.options,
        vendor=s.vendor,
        dry_run=s.dry_run,
        out=sys.stdout if s.dry_run else None,
        metrics=metrics,
    )
    try:
        return _loop(ctx, labeller, trigger, state)
    finally:
        if watching:
            source.stop()
        labeller.close()
        if api is not None:
            api.close()  # type: ignore[no-untyped-call]


FIRST_RETRY_SECONDS = 5.0


def next_pass_in(interval: float, failures: int) -> float:
    """Seconds to the next pass: the interval, or after `failures` failed passes in a row a retry
    from 5 s doubling up to the interval (a first pass that fails while the driver is still loading
    or the API is briefly away should not leave the node unlabelled for a whole interval)."""
    if failures <= 0:
        return interval
    return min(interval, FIRST_RETRY_SECONDS * 2.0 ** min(failures - 1, 30))


def _loop(
    ctx: ServiceContext[LabellerSettings], labeller: NodeLabeller, trigger: Trigger, state: ConfigState
) -> int:
    s = ctx.settings
    failures = 0
    while not ctx.stopping.is_set():
        try:
            labeller.run_once()
        except Exception as exc:
            failures += 1
            log.exception("labelling pass failed", extra={"failures_in_a_row": failures})
            ctx.probes.set_ready(False, f"labelling failed: {type(exc).__name__}")
            if s.once:
                return 1
        else:
            failures = 0
            ctx.probes.set_ready(True)
            if s.once:
                return 0
        reasons = trigger.wait(next_pass_in(state.interval(), failures), settle=s.settle_seconds)
        if any(r.startswith("udev") for r in reasons):
            log.info(
                "hardware changed, relabelling", extra={"events": reasons[:10], "event_count": len(reasons)}
            )
            labeller.invalidate()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    metrics = LabellerMetrics()
    return run_service(
        LabellerSettings,
        lambda ctx: serve(ctx, metrics=metrics),
        service=SERVICE,
        argv=argv,
        registry=metrics.registry,
    )


if __name__ == "__main__":
    raise SystemExit(main())
