"""The DeviceConfig controller: watch caches in, planned writes out, one level-triggered pass at a time.

Each pass recomputes everything from the caches (DeviceConfigs, Nodes, operand Pods and DaemonSets,
the services' ConfigMaps) with the pure functions in `validation`, `plan`, `status` and
`projection`, then sends only the writes that change something. Any watch event just marks the
controller dirty; a failed write is retried by a later pass (with backoff), never lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

import urllib3
from gpuop_common.config import DeviceConfigSpec, LabelSelector
from gpuop_common.kube import EventRecorder, ObjectRef
from kubernetes.client.exceptions import ApiException

from gpuop_operator import views
from gpuop_operator.cache import WatchCache, object_key
from gpuop_operator.crd import GROUP, KIND, VERSION
from gpuop_operator.drain import ControlPods
from gpuop_operator.driverflow import DriverPlan, FailedRun, plan_driver
from gpuop_operator.driverflow import installed as driver_installed
from gpuop_operator.driverio import DriverWriter, pods_to_drain, read_failed_run
from gpuop_operator.driverjob import (
    COMPONENT,
    COMPONENT_LABEL,
    DEFAULT_JOB_IMAGE,
    PULL_CONDITION_REASON,
    JobSettings,
    JobView,
    build_job,
    job_view,
    trim_job,
)
from gpuop_operator.driveruninstall import plan_uninstall
from gpuop_operator.jobresult import PLAYBOOK_NAMES
from gpuop_operator.kubeio import (
    CONFIGMAPS,
    DAEMONSETS,
    DEVICECONFIGS,
    JOBS,
    JSON_PATCH,
    MERGE_PATCH,
    NODES,
    PODS,
    KubeJson,
)
from gpuop_operator.metrics import OperatorMetrics
from gpuop_operator.model import (
    FINALIZER,
    JOB_SERVICES,
    OWNER_ANNOTATION,
    REMEDIATION_ACTIVE,
    REMEDIATION_STATE_LABEL,
    SUPPORTED_SERVICES,
    NodeInfo,
    NodePatch,
)
from gpuop_operator.overridecheck import OVERRIDE_SUFFIXES, override_problems
from gpuop_operator.overridecheck import REASON as REASON_OVERRIDE
from gpuop_operator.plan import PodIndex, RolloutPlan, enabled_stages, plan_rollout, uninstall_stage_patches
from gpuop_operator.profilesource import REASON as PROFILES_REASON
from gpuop_operator.profilesource import NamedProfiles, named_profiles
from gpuop_operator.projection import config_map_name, plan_config_maps
from gpuop_operator.remediation import RemediationPlan, marked_by_remediation, plan_release, plan_remediation
from gpuop_operator.selector import matches
from gpuop_operator.status import (
    build_status,
    driver_status,
    invalid_conditions,
    remediation_status,
    rollout_conditions,
    transitions,
)
from gpuop_operator.validation import DeviceConfigRef, Validation, parse_spec, selector_of, validate

log = logging.getLogger(__name__)

JsonObj = dict[str, Any]
_API_ERRORS = (ApiException, urllib3.exceptions.HTTPError, OSError)


@dataclass(frozen=True)
class ReconcilerSettings:
    namespace: str  # where the operand DaemonSets, pods and ConfigMaps live (the Helm release's)
    release: str  # Helm release name: ConfigMap names and the pods' instance label
    own_pod: str = ""  # the operator's pod name: never drained, whatever its release
    watch_namespace: str | None = None  # DeviceConfigs of one namespace; None = all
    workers: int = 8  # parallel node writes
    resync_interval: float = 300.0
    max_backoff: float = 10.0
    # A status whose conditions did not change (only counts moved) is written at most this often,
    # so a 1,000-node rollout costs a few status writes per second, not one per node.
    status_interval: float = 1.0
    # After a change wakes the loop, wait this long for more: a burst of pod and node events (a
    # DaemonSet rolling onto 1,000 nodes) then costs a few passes instead of one per event.
    coalesce: float = 0.05
    # The per-node driver Jobs (image, service account, host_exec); None: the defaults (the
    # operator's published image, `chroot /host`).
    jobs: JobSettings | None = None


def _now() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"[:300]


class Reconciler:
    def __init__(
        self,
        kube: KubeJson,
        settings: ReconcilerSettings,
        *,
        metrics: OperatorMetrics | None = None,
        events: EventRecorder | None = None,
        dry_run: bool = False,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.metrics = metrics or OperatorMetrics()
        self.events = events
        self.dry_run = dry_run
        self.dirty = threading.Event()
        # Views of the cached Nodes and pods, remade only for objects that changed since a pass.
        self._node_views = views.ViewMemo(views.node_info)
        self._pod_views = views.ViewMemo(views.pod_info)
        self.leading = threading.Event()
        instance = f"{views.INSTANCE_LABEL}={settings.release}"
        ns = settings.namespace
        mark = self.dirty.set
        self.deviceconfigs = WatchCache(kube, DEVICECONFIGS, mark, namespace=settings.watch_namespace)
        self.nodes = WatchCache(kube, NODES, mark, transform=views.trim_node)
        self.pods = WatchCache(
            kube, PODS, mark, namespace=ns, label_selector=instance, transform=views.trim_pod
        )
        self.daemonsets = WatchCache(
            kube, DAEMONSETS, mark, namespace=ns, label_selector=instance, transform=views.trim_named
        )
        # Every ConfigMap of the namespace: the operands' (projected into) and those a DeviceConfig
        # names (`configManager.profilesConfigMap`, the user's: no instance label).
        self.configmaps = WatchCache(kube, CONFIGMAPS, mark, namespace=ns, transform=views.trim_config_map)
        self.jobs = WatchCache(
            kube,
            JOBS,
            mark,
            namespace=ns,
            label_selector=f"{COMPONENT_LABEL}={COMPONENT},{instance}",
            transform=trim_job,
        )
        self._caches: tuple[WatchCache, ...] = (
            self.deviceconfigs,
            self.nodes,
            self.pods,
            self.daemonsets,
            self.configmaps,
            self.jobs,
        )
        overrides = settings.jobs.overrides_config_map if settings.jobs else ""
        # The override ConfigMap is the user's (no instance label): its own one-object watch.
        self.overrides = (
            WatchCache(kube, CONFIGMAPS, mark, namespace=ns, field_selector=f"metadata.name={overrides}")
            if overrides
            else None
        )
        if self.overrides is not None:
            self._caches += (self.overrides,)
        self._override_problems: dict[str, list[str]] = {}  # DeviceConfig -> as last reported
        self._profiles_problems: dict[str, str] = {}  # DeviceConfig -> profilesConfigMap problem reported
        self._pull_reported: dict[str, str] = {}  # DeviceConfig -> unpullable Job images reported
        self._override_checked: tuple[str | None, list[str]] | None = None  # (resourceVersion, problems)
        self._failed_runs: dict[str, FailedRun] = {}  # failed Job uid -> what its pod reported
        self._wake_at = 0.0  # monotonic time a timed driver step is due; 0 when none
        job_settings = settings.jobs or JobSettings(
            namespace=ns, release=settings.release, image=DEFAULT_JOB_IMAGE
        )
        self.job_settings = job_settings
        self._control_pods = ControlPods(settings.namespace, settings.release, settings.own_pod)
        self.driver_writer = DriverWriter(
            kube, job_settings, events, lambda kind: self.metrics.writes.labels(kind).inc(), dry_run=dry_run
        )
        self._status_written: dict[str, float] = {}
        self._status_due = 0.0  # monotonic time of a held-back status write; 0 when none
        self._pool = ThreadPoolExecutor(max_workers=max(1, settings.workers), thread_name_prefix="node-write")
        self.passes = 0

    # -- lifecycle -------------------------------------------------------------------------------
    def start_watches(self) -> None:
        for cache in self._caches:
            cache.start()

    def stop(self) -> None:
        for cache in self._caches:
            cache.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)

    def synced(self) -> bool:
        return all(cache.synced for cache in self._caches)

    def wait_synced(self, timeout: float) -> bool:
        """Block until every cache has listed once (a pass on partial caches would plan wrongly)."""
        deadline = time.monotonic() + timeout
        return all(cache.wait_synced(max(0.0, deadline - time.monotonic())) for cache in self._caches)

    def watches_alive(self) -> bool:
        return all(cache.alive for cache in self._caches)

    def run(self, stopping: Callable[[float], bool], *, tick: float = 0.5) -> None:
        """Reconcile whenever something changed (or every resync_interval) until `stopping(t)` is True.

        `stopping(timeout)` waits up to timeout seconds and returns True once the service stops; the
        loop wakes every `tick` to notice that even when nothing changes."""
        backoff = 0.0
        next_resync = time.monotonic() + self.settings.resync_interval
        while not stopping(0):
            due = (self._status_due and time.monotonic() >= self._status_due) or (
                self._wake_at and time.monotonic() >= self._wake_at
            )
            if not self.dirty.wait(tick) and time.monotonic() < next_resync and not due:
                continue
            if not self.leading.is_set() or not self.synced():
                # Keep the dirty mark: the pass runs once we lead and the caches are full.
                if stopping(tick):
                    return
                continue
            if stopping(self.settings.coalesce):
                return
            self.dirty.clear()
            next_resync = time.monotonic() + self.settings.resync_interval
            try:
                ok = self.reconcile_once()
            except Exception:
                # A bug or a malformed object must not stop the controller: log, back off, retry.
                log.exception("reconcile pass failed")
                self.metrics.errors.labels("pass").inc()
                ok = False
            if ok:
                backoff = 0.0
                continue
            backoff = min(self.settings.max_backoff, max(0.2, backoff * 2))
            self.dirty.set()  # retry after the backoff even if nothing else changes
            if stopping(backoff):
                return

    # -- one pass --------------------------------------------------------------------------------
    def reconcile_once(self) -> bool:
        """One pass over every DeviceConfig; True when every write succeeded."""
        started = time.monotonic()
        self._status_due = 0.0
        self._wake_at = 0.0
        self.passes += 1
        self.metrics.reconciles.inc()
        nodes = self._node_views(self.nodes.items())
        pods = PodIndex.of(p for p in self._pod_views(self.pods.items()) if p is not None)
        installed = {views.service_of(ds) for ds in self.daemonsets.items()}
        objects = sorted(
            self.deviceconfigs.items(), key=lambda o: (DeviceConfigRef.of(o).created, object_key(o))
        )
        live = [o for o in objects if "deletionTimestamp" not in (o.get("metadata") or {})]
        selectors: dict[DeviceConfigRef, LabelSelector] = {}
        for obj in live:
            selector = selector_of(obj)
            if selector is not None:
                selectors[DeviceConfigRef.of(obj)] = selector
        ok = True
        valid: dict[str, DeviceConfigSpec] = {}
        named: dict[str, NamedProfiles] = {}
        for obj in objects:
            owner = object_key(obj)
            try:
                if "deletionTimestamp" in (obj.get("metadata") or {}):
                    self._finalize(obj, nodes, pods)
                    continue
                result = validate(obj, nodes, selectors)
                if result.ok and result.spec is not None:
                    valid[owner] = result.spec
                    named[owner] = self._named_profiles(obj, result.spec)
                problem = named[owner].problem if owner in named else ""
                ok &= self._reconcile_one(obj, result, nodes, pods, installed, profiles_problem=problem)
            except _API_ERRORS as exc:
                ok = False
                self.metrics.errors.labels("deviceconfig").inc()
                log.warning("reconcile failed", extra={"deviceconfig": owner, "error": _describe(exc)})
        holders = {n.name: held for n in nodes if (held := n.annotations.get(OWNER_ANNOTATION))}
        ok &= self._project(valid, [object_key(o) for o in live], holders, named)
        self.metrics.duration.observe(time.monotonic() - started)
        return ok

    def _reconcile_one(
        self,
        obj: JsonObj,
        result: Validation,
        nodes: Sequence[Any],
        pods: PodIndex,
        installed: set[str],
        *,
        profiles_problem: str = "",
    ) -> bool:
        owner = object_key(obj)
        obj = self._ensure_finalizer(obj)
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        previous = obj.get("status") or {}
        if not result.ok or result.spec is None:
            status = build_status(generation, invalid_conditions(result), None, previous, _now())
            self._write_status(obj, status, warning=True)
            self.metrics.deviceconfig_ready.labels(owner).set(0)
            return True
        spec = result.spec
        ok = True
        driver_ready: set[str] = set()
        driver_plan: DriverPlan | None = None
        remediation_plan: RemediationPlan | None = None
        held = ""
        # enable: false with uninstallPolicy Uninstall still drives: the walk that takes it off.
        uninstall = not spec.driver.enable and spec.driver.uninstall_policy == "Uninstall"
        if spec.driver.enable or uninstall or spec.remediation.enable:
            held = self._override_held(obj)
        if (spec.driver.enable or uninstall) and not held:
            ok, driver_plan, nodes = self._drive(owner, spec, nodes, pods, uninstall=uninstall)
        if spec.driver.enable:
            driver_ready = {n.name for n in nodes if driver_installed(n)}
        remediation_held = held
        # A node that left the selector mid-run is given back at once: no run of ours goes on there.
        gone = [
            n
            for n in nodes
            if n.annotations.get(OWNER_ANNOTATION) == owner and not matches(spec.selector, n.labels)
        ]
        ok &= self._release(gone, "the node left the DeviceConfig's selector")
        if not spec.remediation.enable:
            ok &= self._stop_remediation(owner, spec.selector, nodes, "remediation.enable is false")
        elif not held:
            remediation_held = self._playbook_missing(spec.remediation.playbook)
            if not remediation_held:
                done, remediation_plan, nodes = self._remediate(owner, spec, nodes, pods)
                ok &= done
        plan = plan_rollout(
            owner,
            spec,
            nodes,
            pods,
            installed=installed,
            driver_ready=driver_ready,
            driver_unpullable=tuple(driver_plan.pull_problems) if driver_plan is not None else (),
        )
        ok &= self._apply(plan)
        enabled = {service for stage in enabled_stages(spec) for service in stage}
        missing = (enabled & SUPPORTED_SERVICES) - installed - JOB_SERVICES
        pulls = self._pull_problems(obj, driver_plan, remediation_plan)
        problem = (PROFILES_REASON, profiles_problem) if profiles_problem else (PULL_CONDITION_REASON, pulls)
        conditions = rollout_conditions(plan, missing, held=remediation_held or held, problem=problem)
        status = build_status(generation, conditions, plan, previous, _now())
        if driver_plan is not None:
            status["driver"] = driver_status(spec.driver, driver_plan.states)
            self.metrics.set_driver_states(owner, status["driver"]["states"])
        elif held and previous.get("driver"):
            status["driver"] = previous["driver"]  # held, not gone: the nodes are where they were
        if remediation_plan is not None:
            status["remediation"] = remediation_status(remediation_plan.states)
            self.metrics.set_remediation_states(owner, status["remediation"]["states"])
        elif spec.remediation.enable and previous.get("remediation"):
            status["remediation"] = previous["remediation"]
        self._write_status(obj, status, warning=bool(missing))
        self.metrics.set_stages(owner, status.get("stages") or {})
        self.metrics.deviceconfig_ready.labels(owner).set(1 if conditions[0].status else 0)
        return ok

    def _pull_problems(
        self, obj: JsonObj, driver: DriverPlan | None, remediation: RemediationPlan | None
    ) -> str:
        """The per-node Jobs whose image cannot be pulled (Degraded's message, or ""); a Warning
        Event on the DeviceConfig when that changes to a new problem. A kubelet never fails such a
        Job's pod, so without this the DeviceConfig would only say "rolling" until the deadline."""
        found = {
            **(driver.pull_problems if driver else {}),
            **(remediation.pull_problems if remediation else {}),
        }
        message = "; ".join(found[node] for node in sorted(found))
        owner = object_key(obj)
        if message != self._pull_reported.get(owner, ""):
            self._pull_reported[owner] = message
            if message:
                log.warning(
                    "per-node Job image cannot be pulled", extra={"deviceconfig": owner, "problem": message}
                )
                self._event(obj, PULL_CONDITION_REASON, message, "Warning")
        return message

    def _named_profiles(self, obj: JsonObj, spec: DeviceConfigSpec) -> NamedProfiles:
        """The profiles of the ConfigMap `configManager.profilesConfigMap` names; a Warning Event
        when it turns unusable (and a log line when it is usable again)."""
        section = spec.config_manager
        name = f"{self.settings.namespace}/{section.profiles_config_map}"
        found = named_profiles(section, self.settings.namespace, self.configmaps.get(name))
        owner = object_key(obj)
        if found.problem != self._profiles_problems.get(owner, ""):
            self._profiles_problems[owner] = found.problem
            if found.problem:
                log.warning(
                    "config manager profiles unusable",
                    extra={"deviceconfig": owner, "problem": found.problem},
                )
                self._event(obj, PROFILES_REASON, found.problem, "Warning")
            else:
                log.info("config manager profiles usable again", extra={"deviceconfig": owner})
        return found

    def _override_held(self, obj: JsonObj) -> str:
        """Why no driver step of this DeviceConfig may run now (a broken playbook override), or ""."""
        if self.overrides is None:
            return ""
        owner = object_key(obj)
        found = self.overrides.items()
        config_map = found[0] if found else None
        version = None if config_map is None else str(config_map["metadata"].get("resourceVersion", ""))
        if self._override_checked is None or self._override_checked[0] != version:
            # Parsed once per version of the ConfigMap, not on every pass of every DeviceConfig.
            where = f"{self.settings.namespace}/{self.job_settings.overrides_config_map}"
            self._override_checked = (version, override_problems(where, config_map))
        problems = self._override_checked[1]
        if problems != self._override_problems.get(owner, []):
            self._override_problems[owner] = problems
            if problems:
                log.warning("driver lifecycle held", extra={"deviceconfig": owner, "problems": problems})
                self._event(obj, REASON_OVERRIDE, "; ".join(problems), "Warning")
            else:
                log.info(
                    "playbook override usable again; driver lifecycle resumes", extra={"deviceconfig": owner}
                )
        if not problems:
            return ""
        return (
            "; ".join(problems) + ". No driver or remediation Job starts and no node moves until it is fixed"
        )

    def _playbook_missing(self, playbook: str) -> str:
        """Why remediation cannot run `remediation.playbook` (not built in and not overridden), or ""."""
        if playbook in PLAYBOOK_NAMES:
            return ""
        name = self.job_settings.overrides_config_map
        found = self.overrides.items() if self.overrides is not None else []
        data = (found[0].get("data") or {}) if found else {}
        if any(f"{playbook}{suffix}" in data for suffix in OVERRIDE_SUFFIXES):
            return ""
        where = f"ConfigMap {self.settings.namespace}/{name}" if name else "no playbook override ConfigMap"
        return (
            f"spec.remediation.playbook: {playbook!r} is not built in ({', '.join(PLAYBOOK_NAMES)}) and "
            f"{where} has no key {playbook}.yml; no node is remediated until it is there"
        )

    def _job_views(self) -> dict[tuple[str, str], JobView]:
        jobs: dict[tuple[str, str], JobView] = {}
        pulls = views.job_pull_failures(self.pods.items())
        for obj in self.jobs.items():
            view = job_view(obj)
            if view is None:
                continue
            failure = pulls.get(view.name)
            if failure is not None and failure.image == view.image:  # not an older same-named Job's pod
                view = replace(view, pull_reason=failure.reason, pull_message=failure.message)
            jobs[(view.node, view.operation)] = view
        live = {view.uid for view in jobs.values()}
        for uid in [uid for uid in self._failed_runs if uid not in live]:
            del self._failed_runs[uid]  # its Job is gone: nobody asks for its report again
        return jobs

    def _read_reports(self, jobs: Iterable[JobView]) -> bool:
        """Read (once per Job) what the pods of these finished Jobs reported."""
        ok = True
        for view in jobs:
            if view.uid in self._failed_runs:
                continue
            try:
                self._failed_runs[view.uid] = read_failed_run(self.kube, view, self.settings.namespace)
            except _API_ERRORS as exc:
                ok = False
                log.warning("reading a Job's pod failed", extra={"job": view.name, "error": _describe(exc)})
        return ok

    def _stop_remediation(
        self, owner: str, selector: LabelSelector | None, nodes: Sequence[NodeInfo], why: str
    ) -> bool:
        """Give back the nodes a run of this DeviceConfig left tainted or labelled (`selector`
        None: every node it owns, for its deletion)."""
        # The marks first: a few dict lookups per node, where a selector match over 1,000 nodes on
        # every pass of a DeviceConfig without remediation cost a tenth of the pass.
        mine = [
            n
            for n in nodes
            if marked_by_remediation(n)
            and n.annotations.get(OWNER_ANNOTATION) in ((None, owner) if selector is not None else (owner,))
            and (selector is None or matches(selector, n.labels))
        ]
        return self._release(mine, why)

    def _release(self, nodes: Sequence[NodeInfo], why: str) -> bool:
        """Lift the taint, cordon and labels a remediation run left on `nodes` (see plan_release)."""
        plan = plan_release(nodes, why)
        if not plan.patches:
            return True
        skipped = self._patch_nodes(plan.patches)
        ok = self.driver_writer.send((), (), (), (), plan.without(skipped).events, grace=-1)
        return ok and not skipped

    def _remediate(
        self, owner: str, spec: DeviceConfigSpec, nodes: Sequence[NodeInfo], pods: PodIndex
    ) -> tuple[bool, RemediationPlan, list[NodeInfo]]:
        """One pass of remediation over this DeviceConfig's nodes; the nodes as they are after."""
        selected = [
            n
            for n in nodes
            if matches(spec.selector, n.labels) and n.annotations.get(OWNER_ANNOTATION) in (None, owner)
        ]
        names = {n.name for n in selected}
        jobs = self._job_views()
        ok = self._read_reports(
            v
            for v in jobs.values()
            if v.node in names
            and v.run
            and (v.phase == "failed" or (v.phase == "succeeded" and v.operation == "gpu-reset"))
        )
        try:
            node_pods = pods_to_drain(
                self.kube, selected, REMEDIATION_STATE_LABEL, "draining", control=self._control_pods
            )
        except _API_ERRORS as exc:
            log.warning("listing pods to drain failed", extra={"error": _describe(exc)})
            return False, RemediationPlan(), list(nodes)
        config = spec.remediation
        plan = plan_remediation(
            config,
            selected,
            jobs,
            reports=self._failed_runs,
            node_pods=node_pods,
            operand_pods=pods.on_node,
            now=time.time(),
            active_elsewhere=sum(
                1
                for n in nodes
                if n.name not in names and n.labels.get(REMEDIATION_STATE_LABEL) in REMEDIATION_ACTIVE
            ),
            driver_enabled=spec.driver.enable,
            validation_recipe=spec.test_runner.recipe if spec.test_runner.enable else None,
            validation_timeout_s=float(spec.test_runner.timeout_seconds),
            allocatable_expected=spec.device_plugin.enable,
            job_image=spec.driver.image or self.job_settings.image,
            driver_image=spec.driver.image,
        )
        # As in _drive: node patches first; a node's Jobs, evictions and Events only once its step is
        # recorded (a taint patch refused for a stale resourceVersion runs again next pass).
        skipped = self._patch_nodes(plan.patches)
        ok &= not skipped
        sent = plan.without(skipped)
        manifests = [
            build_job(
                self.job_settings,
                job.operation,
                job.node,
                job.vendor,
                spec.driver,
                playbook=job.playbook,
                gpus=job.gpus,
                run=job.run,
            )
            for job in sent.create_jobs
        ]
        ok &= self.driver_writer.send(
            manifests,
            sent.delete_jobs,
            sent.evict,
            (),
            sent.events,
            grace=config.node_drain_policy.grace_period_seconds,
        )
        if plan.patches or plan.create_jobs or plan.delete_jobs:
            self.dirty.set()  # as in _drive: the next step is often due at once
        for _node, result in sent.finished:
            self.metrics.remediation_runs.labels(result).inc()
        if plan.wake_after is not None:
            due = time.monotonic() + plan.wake_after
            self._wake_at = min(self._wake_at or due, due)
        after = {n.name: n for n in self._node_views(self.nodes.items())}
        return ok, plan, [after.get(n.name, n) for n in nodes]

    def _drive(
        self,
        owner: str,
        spec: DeviceConfigSpec,
        nodes: Sequence[NodeInfo],
        pods: PodIndex,
        *,
        uninstall: bool = False,
    ) -> tuple[bool, DriverPlan, list[NodeInfo]]:
        """One pass of the driver lifecycle of this DeviceConfig's nodes; the nodes as they are after."""
        selected = [
            n
            for n in nodes
            if matches(spec.selector, n.labels) and n.annotations.get(OWNER_ANNOTATION) in (None, owner)
        ]
        jobs = self._job_views()
        ok = self._read_reports(v for v in jobs.values() if v.phase == "failed" and not v.run)
        try:
            node_pods = pods_to_drain(self.kube, selected, control=self._control_pods)
        except _API_ERRORS as exc:
            log.warning("listing pods to drain failed", extra={"error": _describe(exc)})
            return False, DriverPlan(), list(nodes)
        plan = (plan_uninstall if uninstall else plan_driver)(
            spec.driver,
            selected,
            jobs,
            node_pods=node_pods,
            operand_pods=pods.on_node,
            failed_runs=self._failed_runs,
            now=time.time(),
            job_deadline_s=float(self.job_settings.deadline_seconds),
            validation_recipe=spec.test_runner.recipe if spec.test_runner.enable else None,
            validation_timeout_s=float(spec.test_runner.timeout_seconds),
            allocatable_expected=spec.device_plugin.enable,
            job_image=spec.driver.image or self.job_settings.image,
        )
        # Node patches first: a step's Job, evictions and Events follow only once its node records
        # the step. A node starts only when every other patch applied, so a slot freed this pass
        # is really free before it is handed on.
        skipped = self._patch_nodes(plan.patches)
        if skipped:
            skipped |= {patch.node for patch in plan.start_patches}
        else:
            skipped = self._patch_nodes(plan.start_patches)
        ok &= not skipped
        ok &= self.driver_writer.apply(plan.without(skipped), spec.driver)
        if plan.patches or plan.start_patches or plan.create_jobs or plan.delete_jobs:
            # A step's own writes come back as watch events the caches already hold, so they wake
            # nobody: the walk's next step (often due at once, e.g. cordoned -> draining) needs a pass.
            self.dirty.set()
        for _node, seconds in plan.finished:
            self.metrics.driver_upgrade_seconds.observe(seconds)
        if plan.wake_after is not None:
            due = time.monotonic() + plan.wake_after
            self._wake_at = min(self._wake_at or due, due)
        after = {n.name: n for n in self._node_views(self.nodes.items())}
        return ok, plan, [after.get(n.name, n) for n in nodes]

    def _finalize(self, obj: JsonObj, nodes: Sequence[Any], pods: PodIndex) -> None:
        owner = object_key(obj)
        finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
        if FINALIZER not in finalizers:
            return
        if not self._stop_remediation(owner, None, nodes, f"DeviceConfig {owner} deleted"):
            return
        if not self._uninstalled_before_release(obj, nodes, pods):
            return
        plan = plan_rollout(owner, None, nodes, pods)
        if not self._apply(plan):
            return
        if plan.stages:
            status = build_status(
                int(obj["metadata"].get("generation") or 0),
                rollout_conditions(plan, [], deleting=True),
                plan,
                obj.get("status"),
                _now(),
            )
            self._write_status(obj, status, warning=False)
            return
        remaining = [f for f in finalizers if f != FINALIZER]
        body = {
            "metadata": {"finalizers": remaining, "resourceVersion": obj["metadata"].get("resourceVersion")}
        }
        self._write_dc(obj, body, kind="finalizer")
        self.metrics.forget(owner)
        self._event(obj, "Cleaned", "removed gpuop labels from every node; finalizer released", "Normal")

    def _uninstalled_before_release(self, obj: JsonObj, nodes: Sequence[NodeInfo], pods: PodIndex) -> bool:
        """With `uninstallPolicy: Uninstall`, the driver gpuop installed comes off the DeviceConfig's
        nodes before its operands and finalizer go; True once no node of it has our driver left.
        A node whose uninstall failed holds the finalizer until a person acts (docs/operator.md)."""
        spec, _ = parse_spec(obj.get("spec"))
        if spec is None or spec.driver.uninstall_policy != "Uninstall":
            return True  # Keep (or a spec that never validated: nothing of ours was started)
        if self._override_held(obj):
            return False
        owner = object_key(obj)
        _ok, plan, after = self._drive(owner, spec, nodes, pods, uninstall=True)
        left = {n: s for n, s in plan.states.items() if s.version or s.state == "installing"}
        if not left:
            return True
        self._apply(RolloutPlan(), uninstall_stage_patches(owner, after))
        previous = obj.get("status") or {}
        rollout = plan_rollout(owner, None, nodes, pods)
        status = build_status(
            int(obj["metadata"].get("generation") or 0),
            rollout_conditions(rollout, [], deleting=True),
            rollout,
            previous,
            _now(),
        )
        status["driver"] = driver_status(spec.driver, plan.states)
        self._write_status(obj, status, warning=False)
        return False

    # -- writes ----------------------------------------------------------------------------------
    def _apply(self, plan: RolloutPlan, extra: Sequence[NodePatch] = ()) -> bool:
        steps = [*plan.steps, *extra]
        if not steps:
            return True
        results = list(self._pool.map(self._patch_node, steps))
        return all(results)

    def _patch_nodes(self, patches: Sequence[NodePatch]) -> set[str]:
        """Send the patches; the nodes whose patch failed."""
        results = list(self._pool.map(self._patch_node, patches))
        return {patch.node for patch, applied in zip(patches, results, strict=True) if not applied}

    def _patch_node(self, patch: NodePatch) -> bool:
        if self.dry_run:
            log.info("dry run: would patch node", extra={"node": patch.node, "patch": patch.body()})
            return True
        try:
            self.metrics.writes.labels("node").inc()
            updated = self.kube.patch(NODES, patch.node, patch.body())
        except _API_ERRORS as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return True  # the node is gone; its deletion event updates the cache
            self.metrics.errors.labels("node").inc()
            log.warning("node patch failed", extra={"node": patch.node, "error": _describe(exc)})
            return False
        self.nodes.update(updated)
        return True

    def _write_dc(
        self, obj: JsonObj, body: Any, *, kind: str, sub: str | None = None, content_type: str = MERGE_PATCH
    ) -> None:
        if self.dry_run:
            log.info(
                "dry run: would update DeviceConfig", extra={"deviceconfig": object_key(obj), "kind": kind}
            )
            return
        meta = obj.get("metadata") or {}
        self.metrics.writes.labels(kind).inc()
        try:
            updated = self.kube.patch(
                DEVICECONFIGS,
                str(meta.get("name")),
                body,
                str(meta.get("namespace")),
                sub=sub,
                content_type=content_type,
            )
        except ApiException as exc:
            if exc.status == 404:
                return
            self.metrics.errors.labels(kind).inc()
            raise
        self.deviceconfigs.update(updated)

    def _ensure_finalizer(self, obj: JsonObj) -> JsonObj:
        """The DeviceConfig with our finalizer (added first if missing), so deletion waits for cleanup."""
        meta = obj.get("metadata") or {}
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER in finalizers:
            return obj
        body = {
            "metadata": {
                "finalizers": [*finalizers, FINALIZER],
                "resourceVersion": meta.get("resourceVersion"),
            }
        }
        self._write_dc(obj, body, kind="finalizer")
        return self.deviceconfigs.get(object_key(obj)) or obj

    def _write_status(self, obj: JsonObj, status: JsonObj, *, warning: bool) -> None:
        previous = obj.get("status") or {}
        if previous == status:
            return
        owner, now = object_key(obj), time.monotonic()
        changed = transitions(previous, status)
        last = self._status_written.get(owner, 0.0)
        same_generation = previous.get("observedGeneration") == status.get("observedGeneration")
        if not changed and same_generation and now - last < self.settings.status_interval:
            due = last + self.settings.status_interval
            self._status_due = min(self._status_due or due, due)
            return
        self._status_written[owner] = now
        # Replace the whole status: a merge patch could not drop nodes that left the map.
        self._write_dc(
            obj,
            [{"op": "add", "path": "/status", "value": status}],
            kind="status",
            sub="status",
            content_type=JSON_PATCH,
        )
        for condition in changed:
            if condition["type"] != "Ready":
                continue
            kind = (
                "Warning"
                if warning or (condition["status"] != "True" and condition["reason"] != "RolloutInProgress")
                else "Normal"
            )
            self._event(obj, str(condition["reason"]), str(condition["message"]), kind)

    def _event(self, obj: JsonObj, reason: str, message: str, kind: str) -> None:
        if self.events is None or self.dry_run:
            return
        meta = obj.get("metadata") or {}
        ref = ObjectRef(
            kind=KIND,
            name=str(meta.get("name")),
            namespace=str(meta.get("namespace")),
            uid=str(meta.get("uid", "")),
            api_version=f"{GROUP}/{VERSION}",
        )
        self.events.record(
            ref, reason or "Unknown", message or reason, "Warning" if kind == "Warning" else "Normal"
        )

    def _project(
        self,
        valid: dict[str, DeviceConfigSpec],
        existing: list[str],
        holders: dict[str, str],
        named: dict[str, NamedProfiles],
    ) -> bool:
        ok = True
        currents: dict[str, JsonObj] = {}
        for service in sorted(SUPPORTED_SERVICES):
            name = config_map_name(self.settings.release, service)
            current = self.configmaps.get(f"{self.settings.namespace}/{name}")
            if current is not None:  # else the service's chart is not installed: nothing to project into
                currents[service] = current.get("data") or {}
        planned = plan_config_maps(currents, valid, existing, holders, named=named)
        for service, changes in planned.items():
            name = config_map_name(self.settings.release, service)
            if not changes:
                continue
            if self.dry_run:
                log.info(
                    "dry run: would update ConfigMap", extra={"configmap": name, "keys": sorted(changes)}
                )
                continue
            try:
                self.metrics.writes.labels("configmap").inc()
                updated = self.kube.patch(CONFIGMAPS, name, {"data": changes}, self.settings.namespace)
            except _API_ERRORS as exc:
                ok = False
                self.metrics.errors.labels("configmap").inc()
                log.warning("ConfigMap update failed", extra={"configmap": name, "error": _describe(exc)})
                continue
            self.configmaps.update(updated)
        return ok
