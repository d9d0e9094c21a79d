"""`gpuop-operator`: reconcile DeviceConfigs while holding the leader Lease.

Thin wiring: settings, an API client, the watch caches and reconciler, leader election, probes and
metrics on port 8080. `--apply-crd` only creates/updates the CRD and exits (the chart's upgrade hook);
`--uninstall-cleanup` removes DeviceConfigs and node marks and exits (the chart's pre-delete hook).
`gpuop-operator playbook <name> ...` runs a driver playbook on this node instead (playbookrun).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading

from gpuop_common.kube import EventRecorder, make_api_client
from gpuop_common.leader import LeaderElector, LeaseConfig
from gpuop_common.settings import AgentSettings
from gpuop_common.shutdown import ServiceContext, run_service
from kubernetes import client
from pydantic import Field

from gpuop_operator.crdapply import apply_crd
from gpuop_operator.driverjob import DEFAULT_JOB_IMAGE, JobSettings
from gpuop_operator.kubeio import KubeJson
from gpuop_operator.metrics import OperatorMetrics
from gpuop_operator.reconciler import Reconciler, ReconcilerSettings
from gpuop_operator.uninstall import uninstall_cleanup

log = logging.getLogger(__name__)
SERVICE = "operator"


class OperatorSettings(AgentSettings):
    probe_port: int = Field(8080, ge=0, le=65535, description="Port of /healthz, /readyz and /metrics.")
    namespace: str = Field(
        default_factory=lambda: os.environ.get("POD_NAMESPACE", "gpu-operator"),
        description="Namespace of the Helm release (operand DaemonSets, pods, ConfigMaps, the Lease).",
    )
    release: str = Field("gpuop", description="Helm release name: ConfigMaps are <release>-<service>-config.")
    watch_namespace: str = Field(
        "", description="Only reconcile DeviceConfigs in this namespace; empty: all."
    )
    leader_elect: bool = Field(True, description="Hold a Lease so that only one replica acts.")
    lease_name: str = Field("gpuop-operator", description="Name of the leader-election Lease.")
    identity: str = Field(
        default_factory=lambda: os.environ.get("POD_NAME") or socket.gethostname(),
        description="This replica's name in the Lease (default: env POD_NAME, else the host name).",
    )
    workers: int = Field(8, ge=1, le=64, description="Parallel node writes.")
    resync_interval: float = Field(300.0, gt=0, description="Seconds between full reconciles with no events.")
    sync_timeout: float = Field(60.0, gt=0, description="Seconds to wait for the first list of every watch.")
    apply_crd: bool = Field(False, description="Create or update the DeviceConfig CRD, then exit.")
    uninstall_cleanup: bool = Field(
        False,
        description="Delete every DeviceConfig, wait for the operator's cleanup, remove gpuop node "
        "labels and annotations, then exit (the chart's pre-delete hook).",
    )
    driver_job_image: str = Field(
        DEFAULT_JOB_IMAGE,
        description="Image of the per-node driver Jobs: the operator's own (the chart sets it).",
    )
    driver_job_deadline: int = Field(
        3600, ge=120, le=86400, description="activeDeadlineSeconds of a driver Job."
    )
    driver_job_ttl: int = Field(3600, ge=0, le=604800, description="ttlSecondsAfterFinished of a driver Job.")
    driver_job_host_exec: str = Field("", description="Prefix of every host command; empty: `chroot /host`.")
    driver_job_priority_class: str = Field(
        "system-node-critical",
        pattern=r"^$|^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
        description="PriorityClass of a driver Job; empty: none (where a ResourceQuota refuses "
        "system-node-critical outside kube-system).",
    )
    driver_playbook_overrides: str = Field(
        "",
        description="ConfigMap (release namespace) whose `<playbook>.yml` keys replace built-in playbooks.",
    )
    cleanup_timeout: float = Field(
        120.0, gt=0, description="Seconds --uninstall-cleanup waits for the operator, then for agents."
    )


# One registry per process: run_service serves it on the probe port's /metrics.
metrics_registry = OperatorMetrics()


def _api_client(settings: OperatorSettings) -> client.ApiClient:
    base = make_api_client(settings.kubeconfig)
    configuration = base.configuration
    # One connection per node-write worker plus the five watches and the elector.
    configuration.connection_pool_maxsize = settings.workers + 8
    return client.ApiClient(configuration)


def run(ctx: ServiceContext[OperatorSettings]) -> int:
    s = ctx.settings
    api = _api_client(s)
    kube = KubeJson(api)
    if s.apply_crd:
        outcome = apply_crd(kube)
        log.info("CRD applied", extra={"outcome": outcome})
        return 0
    if s.uninstall_cleanup:
        report = uninstall_cleanup(
            kube,
            namespace=s.namespace,
            release=s.release,
            watch_namespace=s.watch_namespace or None,
            timeout=s.cleanup_timeout,
        )
        log.info(
            "uninstall cleanup done",
            extra={
                "deviceconfigs": list(report.deleted),
                "finalizers_released_here": list(report.forced),
                "nodes_cleaned": list(report.cleaned_nodes),
                "agents_still_running_on": list(report.agents_still_running),
                "driver_uninstall_cut_short": list(report.uninstall_cut_short),
            },
        )
        return 0
    metrics = metrics_registry
    reconciler = Reconciler(
        kube,
        ReconcilerSettings(
            namespace=s.namespace,
            release=s.release,
            own_pod=os.environ.get("POD_NAME", ""),
            watch_namespace=s.watch_namespace or None,
            workers=s.workers,
            resync_interval=s.resync_interval,
            jobs=JobSettings(
                namespace=s.namespace,
                release=s.release,
                image=s.driver_job_image,
                host_exec=s.driver_job_host_exec or None,
                priority_class=s.driver_job_priority_class,
                overrides_config_map=s.driver_playbook_overrides,
                deadline_seconds=s.driver_job_deadline,
                ttl_seconds=s.driver_job_ttl,
            ),
        ),
        metrics=metrics,
        events=EventRecorder(api, component="gpuop-operator", host=s.identity, dry_run=s.dry_run),
        dry_run=s.dry_run,
    )
    reconciler.start_watches()
    ctx.probes.add_readiness_check("caches-synced", reconciler.synced)
    ctx.probes.add_liveness_check("watches", reconciler.watches_alive)
    ctx.probes.set_ready(True)
    try:
        if s.once:
            if not reconciler.wait_synced(s.sync_timeout):
                log.error("caches did not sync", extra={"timeout": s.sync_timeout})
                return 1
            reconciler.leading.set()
            return 0 if reconciler.reconcile_once() else 1
        elector_thread: threading.Thread | None = None
        if s.leader_elect:
            elector = LeaderElector(
                api,
                LeaseConfig(name=s.lease_name, namespace=s.namespace, identity=s.identity),
                on_started_leading=lambda: _lead(reconciler, metrics, True),
                on_stopped_leading=lambda: _lead(reconciler, metrics, False),
            )
            elector_thread = elector.start_in_thread(ctx.stopping)
        else:
            _lead(reconciler, metrics, True)
        reconciler.run(ctx.stopping.wait)
        if elector_thread is not None:
            elector_thread.join(timeout=5)
        return 0
    finally:
        reconciler.stop()


def _lead(reconciler: Reconciler, metrics: OperatorMetrics, leading: bool) -> None:
    log.info("leadership changed", extra={"leading": leading})
    metrics.leader.set(1 if leading else 0)
    if leading:
        reconciler.leading.set()
        reconciler.dirty.set()
    else:
        reconciler.leading.clear()


def main() -> int:
    if sys.argv[1:2] == ["playbook"]:  # the per-node driver Job's command, not the controller
        from gpuop_operator import playbookrun  # ansible-runner only where a playbook runs

        return playbookrun.main(sys.argv[2:])
    return run_service(OperatorSettings, run, service=SERVICE, registry=metrics_registry.registry)


if __name__ == "__main__":
    raise SystemExit(main())
