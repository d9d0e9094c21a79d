"""`kubectl gpuop doctor`: walk the chain from DeviceConfig to schedulable GPUs for one node (pure).

The links, in order: which DeviceConfig selects the node; the node's Ready; the driver; each operand
pod; the device plugin's GPUs in allocatable against the GPUs the labeller counted; GPU health;
remediation and partitioning; cordons and taints. Every broken link becomes a `Finding` with the
evidence read from the cluster and the next thing to do; the first one with severity `error` is the
verdict. Everything here works on a `Snapshot`, so tests drive it with plain objects too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass

from gpuop_common import operandpause
from gpuop_common.config import DeviceConfigSpec, LabelSelector
from gpuop_common.kubeobj import (
    IMAGE_PULL_REASONS,
    Obj,
    annotations_of,
    condition_of,
    image_pull_failure,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    node_is_ready,
    pod_is_ready,
    pod_phase,
    spec_of,
    status_of,
)
from gpuop_common.nodemeta import (
    CONFIG_FAILURE_ANNOTATION,
    CONFIG_STATE_LABEL,
    DEPLOY_LABEL_PREFIX,
    DRIVER_FAILURE_ANNOTATION,
    DRIVER_UNINSTALL_STATES,
    DRIVER_UPGRADE_CORDONING,
    DRIVER_UPGRADE_STATE_LABEL,
    DRIVER_VERSION_LABEL,
    GPU_COUNT_LABEL,
    GPU_HEALTHY_CONDITION,
    OWNER_ANNOTATION,
    PAUSED_PREFIX,
    REMEDIATION_CORDONING,
    REMEDIATION_FAILURE_ANNOTATION,
    REMEDIATION_REPAIR_ANNOTATION,
    REMEDIATION_STATE_LABEL,
    STAGE_ANNOTATION,
)
from pydantic import ValidationError

from gpuop_kubectl import findings as f
from gpuop_kubectl.findings import Finding
from gpuop_kubectl.snapshot import Snapshot, log_key
from gpuop_kubectl.table import app_name, gpu_allocatable

PCI_ADDRESS = re.compile(r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")
INVALID_REASONS = frozenset({"InvalidSpec", "Unsupported", "InvalidForVendor"})
JOB_NODE_ANNOTATION = "gpuop.dev/node"  # the operator's per-node Jobs name their node here
JOB_OPERATION_LABEL = "gpuop.dev/operation"
PULL_REASONS = IMAGE_PULL_REASONS
# Taints the kubelet or gpuop itself sets and that the other findings explain already.
EXPLAINED_TAINTS = ("node.kubernetes.io/unschedulable", "node.kubernetes.io/not-ready")
DRIVER_WAITS = {
    "upgrade-required": "a free slot within maxParallelUpgrades and maxUnavailableNodes",
    "cordoned": "the drain to start",
    "draining": "the node's pods to be evicted (nodeDrainPolicy)",
    "pod-restart": "the paused GPU operands' pods to go",
    "upgrading": "the driver-install Job with the new version",
    "rebooting": "the node-reboot Job: a new bootID and Ready",
    "validating": "the node Ready with its GPUs in allocatable (and the test runner's Passed answer)",
    "uninstall-required": "a free slot within maxParallelUpgrades and maxUnavailableNodes",
    "uninstalling": "the driver-uninstall Job",
}
REMEDIATION_WAITS = {
    "detected": "the trigger to hold conditionHoldSeconds, a maxParallel slot, or the driver lifecycle",
    "awaiting-approval": "an approval: kubectl label node {node} gpuop.dev/remediation-approved=true",
    "tainted": "the drain to start",
    "draining": "the node's pods to be evicted (nodeDrainPolicy)",
    "repairing": "the repair Job{job}",
    "validating": "the node Ready, the trigger cleared, GPUs back in allocatable, the test runner's answer",
}


@dataclass(frozen=True)
class NodeReport:
    node: str
    findings: tuple[Finding, ...]
    serving: str = ""  # what the node offers when it serves GPUs: `amd.com/gpu=8`

    @property
    def ok(self) -> bool:
        return not any(x.is_error for x in self.findings)

    @property
    def verdict(self) -> Finding | None:
        """The first broken link: the first error, else the first warning."""
        errors = [x for x in self.findings if x.is_error]
        ordered = errors or list(self.findings)
        return ordered[0] if ordered else None

    def to_json(self) -> dict[str, object]:
        verdict = self.verdict
        return {
            "node": self.node,
            "serving": self.ok,
            "offers": self.serving,
            "verdict": verdict.code.code if verdict else None,
            "findings": [x.to_json() for x in self.findings],
        }


def diagnose(snap: Snapshot, node_name: str) -> NodeReport:
    node = next((n for n in snap.nodes if name_of(n) == node_name), None)
    if node is None:
        return NodeReport(node_name, (Finding(f.N001, f"no Node {node_name!r} in the cluster"),))
    found = list(_walk(snap, node))
    offers = ", ".join(f"{k}={v}" for k, v in sorted(gpu_allocatable(node).items()) if v not in ("0", ""))
    return NodeReport(node_name, tuple(found), offers)


def _walk(snap: Snapshot, node: Obj) -> Iterator[Finding]:
    config = yield from _selection(snap, node)
    if not node_is_ready(node):
        ready = condition_of(node, "Ready") or {}
        yield Finding(
            f.N001,
            f"the node is not Ready ({ready.get('reason') or 'no Ready condition'})",
            (f"Ready={ready.get('status', '?')}: {ready.get('message', '')}".strip(),),
            "check the kubelet on the node (journalctl -u kubelet); nothing gpuop runs there until "
            "it is Ready",
        )
    spec = _spec(config) if config is not None else None
    uninstall_state = labels_of(node).get(DRIVER_UPGRADE_STATE_LABEL, "")
    yield from _job_images(snap, node)
    if uninstall_state in DRIVER_UNINSTALL_STATES:
        # enable: false, or the DeviceConfig deleted, with uninstallPolicy: Uninstall.
        yield from _uninstall(snap, node, uninstall_state)
    elif spec is not None and spec.driver.enable:
        yield from _driver(snap, node)
    yield from _operands(snap, node)
    if spec is not None and spec.device_plugin.enable and not spec.dra_driver.enable:
        yield from _allocatable(snap, node)
    yield from _health(node, spec)
    yield from _remediation(snap, node)
    if config is not None and spec is not None:
        yield from _partition(node, config, spec)
    yield from _pauses(node)
    yield from _scheduling(node)


# ------------------------------------------------------------------ selection
def _created(config: Obj) -> tuple[str, str]:
    return str(meta(config).get("creationTimestamp") or ""), key_of(config)


def selecting(snap: Snapshot, node: Obj) -> list[Obj]:
    """The DeviceConfigs whose selector matches the node, oldest first (the oldest keeps it)."""
    labels = labels_of(node)
    chosen = []
    for config in snap.deviceconfigs:
        try:
            selector = LabelSelector.model_validate(spec_of(config).get("selector") or {})
        except ValidationError:
            continue
        if selector.matches(labels):
            chosen.append(config)
    return sorted(chosen, key=_created)


def _ready(config: Obj) -> Obj:
    return condition_of(config, "Ready") or {}


def _spec(config: Obj) -> DeviceConfigSpec | None:
    try:
        return DeviceConfigSpec.model_validate(spec_of(config))
    except ValidationError:
        return None


def _selection(snap: Snapshot, node: Obj) -> Generator[Finding, None, Obj | None]:
    """Yields the selection findings and returns the DeviceConfig that owns the node (or None)."""
    name = name_of(node)
    chosen = selecting(snap, node)
    if not chosen:
        listed = [
            f"{key_of(c)} selects {json.dumps(spec_of(c).get('selector') or {}, sort_keys=True)}"
            for c in sorted(snap.deviceconfigs, key=key_of)
        ]
        yield Finding(
            f.S001,
            f"no DeviceConfig's spec.selector matches the labels of {name}",
            tuple(listed) or ("no DeviceConfig in the cluster",),
            "label the node to match a DeviceConfig's selector (kubectl label node "
            f"{name} KEY=VALUE), widen a selector, or create a DeviceConfig for it",
        )
        return None
    owner_key = annotations_of(node).get(OWNER_ANNOTATION, "")
    owner = next((c for c in chosen if key_of(c) == owner_key), chosen[0])
    if len(chosen) > 1:
        yield Finding(
            f.S002,
            f"{len(chosen)} DeviceConfigs select {name}: " + ", ".join(key_of(c) for c in chosen),
            (
                *(
                    f"{key_of(c)} created {_created(c)[0] or '?'}: Ready={_ready(c).get('status', '?')} "
                    f"{_ready(c).get('reason', '')} {_ready(c).get('message', '')}".rstrip()
                    for c in chosen
                ),
                f"the node's owner annotation {OWNER_ANNOTATION}={owner_key or '(none)'}",
            ),
            f"narrow the selectors so that one DeviceConfig selects {name}; the older one "
            f"({key_of(chosen[0])}) keeps it, the newer changes nothing on any node until then",
        )
    ready = _ready(owner)
    if ready.get("status") == "False" and ready.get("reason") in INVALID_REASONS:
        yield Finding(
            f.S003,
            f"DeviceConfig {key_of(owner)} is {ready.get('reason')}: nothing is rolled out",
            (str(ready.get("message", "")),),
            f"fix the field named above: kubectl -n {namespace_of(owner)} edit deviceconfig {name_of(owner)}",
        )
    return owner


# ------------------------------------------------------------------ driver
def _node_events(snap: Snapshot, node: str, *reasons: str) -> list[Obj]:
    found = [
        e
        for e in snap.events
        if (e.get("involvedObject") or {}).get("kind") == "Node"
        and (e.get("involvedObject") or {}).get("name") == node
        and (not reasons or e.get("reason") in reasons)
    ]
    return sorted(found, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))


def node_jobs(snap: Snapshot, node: str, *operations: str) -> list[Obj]:
    return [
        j
        for j in snap.jobs
        if annotations_of(j).get(JOB_NODE_ANNOTATION) == node
        and (not operations or labels_of(j).get(JOB_OPERATION_LABEL) in operations)
    ]


def _job_state(job: Obj) -> str:
    status = status_of(job)
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Failed", "Complete"):
            return f"{cond['type']} ({cond.get('reason') or ''})".replace(" ()", "")
    return "running" if status.get("active") else "pending"


def failed_tasks(snap: Snapshot, job: Obj) -> list[str]:
    """The failed tasks a Job's pod reported in its termination message (the playbook summary)."""
    tasks = []
    for pod in snap.pods:
        if labels_of(pod).get("job-name") != name_of(job) or namespace_of(pod) != namespace_of(job):
            continue
        for container in status_of(pod).get("containerStatuses") or []:
            message = ((container.get("state") or {}).get("terminated") or {}).get("message") or ""
            try:
                summary = json.loads(message)
            except ValueError:
                continue
            for task in summary.get("failed_tasks") or [] if isinstance(summary, dict) else []:
                detail = task.get("stderr_tail") or task.get("message") or task.get("command") or ""
                tasks.append(f"task {task.get('task')!r} failed: {str(detail).strip()}")
    return tasks


def _job_images(snap: Snapshot, node: Obj) -> Iterator[Finding]:
    """A per-node Job (driver install/uninstall, reboot, reset) whose pod cannot pull its image.
    A kubelet keeps that pod Pending and the Job active until its deadline, never Failed, so the
    walk it belongs to only looks slow: this is the link to fix."""
    for job in node_jobs(snap, name_of(node)):
        if _job_state(job).startswith(("Failed", "Complete")):
            continue
        for pod in snap.pods:
            if labels_of(pod).get("job-name") != name_of(job) or namespace_of(pod) != namespace_of(job):
                continue
            pull = image_pull_failure(pod)
            if pull is None:
                continue
            operation = labels_of(job).get(JOB_OPERATION_LABEL, "")
            events = [
                str(e.get("message", ""))
                for e in _node_events(
                    snap, name_of(node), "DriverImagePullFailed", "RemediationImagePullFailed"
                )
            ]
            yield Finding(
                f.D007,
                f"{operation} Job {key_of(job)} cannot pull image {pull.image!r} ({pull.reason})",
                (pull.message, f"pod {key_of(pod)} Pending", *events[-2:]),
                "set the DeviceConfig's spec.driver.image to an image the node can pull (empty: the "
                "operator's own image, the chart's operator image values) or fix its pull secret; "
                "the operator replaces the Job when the field changes",
            )
            return


def _driver(snap: Snapshot, node: Obj) -> Iterator[Finding]:
    name = name_of(node)
    labels = labels_of(node)
    state, version = labels.get(DRIVER_UPGRADE_STATE_LABEL, ""), labels.get(DRIVER_VERSION_LABEL, "")
    jobs = node_jobs(snap, name, "driver-install")
    job_lines = tuple(f"Job {key_of(j)}: {_job_state(j)}" for j in jobs)
    if state == "upgrade-failed":
        code = f.D004 if version else f.D003
        reason = ("DriverUpgradeFailed",) if version else ("DriverInstallFailed",)
        tasks = [t for j in jobs for t in failed_tasks(snap, j)]
        events = [str(e.get("message", "")) for e in _node_events(snap, name, *reason)]
        failure = annotations_of(node).get(DRIVER_FAILURE_ANNOTATION, "")
        evidence = (f"{DRIVER_FAILURE_ANNOTATION}: {failure}",) if failure else ()
        yield Finding(
            code,
            failure.split(": task", 1)[0] or f"{DRIVER_UPGRADE_STATE_LABEL}=upgrade-failed",
            evidence + tuple(dict.fromkeys(tasks or events[-5:])) + job_lines,
            "fix what the failed task names (packages, kernel headers, DKMS build), then retry: "
            f"kubectl label node {name} {DRIVER_UPGRADE_STATE_LABEL}=upgrade-required --overwrite",
        )
    elif not version:
        yield Finding(
            f.D001,
            "the operator's driver-install Job has not finished on this node",
            job_lines or ("no driver Job yet: the operator creates it on its next pass",),
            f"wait; follow it with kubectl -n {snap.namespace} logs -f job/{name_of(jobs[0])}"
            if jobs
            else "check that the operator runs: kubectl -n " + snap.namespace + " get pods",
        )
    elif state in DRIVER_WAITS:
        yield Finding(
            f.D002,
            f"driver upgrade step {state} (installed {version})",
            (f"{DRIVER_UPGRADE_STATE_LABEL}={state}", f"waits for {DRIVER_WAITS[state]}", *job_lines),
            "wait for the walk to end (upgrade-done); kubectl get deviceconfig shows the rollout",
        )


def _uninstall(snap: Snapshot, node: Obj, state: str) -> Iterator[Finding]:
    """`driver.enable: false` (or a deleted DeviceConfig) with `uninstallPolicy: Uninstall`."""
    name = name_of(node)
    jobs = node_jobs(snap, name, "driver-uninstall")
    job_lines = tuple(f"Job {key_of(j)}: {_job_state(j)}" for j in jobs)
    version = labels_of(node).get(DRIVER_VERSION_LABEL, "")
    if state == "uninstall-failed":
        tasks = [t for j in jobs for t in failed_tasks(snap, j)]
        events = [str(e.get("message", "")) for e in _node_events(snap, name, "DriverUninstallFailed")]
        failure = annotations_of(node).get(DRIVER_FAILURE_ANNOTATION, "")
        evidence = (f"{DRIVER_FAILURE_ANNOTATION}: {failure}",) if failure else ()
        yield Finding(
            f.D006,
            failure.split(": task", 1)[0] or f"{DRIVER_UPGRADE_STATE_LABEL}=uninstall-failed",
            evidence + tuple(dict.fromkeys(tasks or events[-5:])) + job_lines,
            "fix what the failed task names, then retry: "
            f"kubectl label node {name} {DRIVER_UPGRADE_STATE_LABEL}=uninstall-required --overwrite "
            "(or set uninstallPolicy: Keep to leave the driver)",
        )
        return
    yield Finding(
        f.D005,
        f"driver uninstall step {state} (installed {version or 'unknown'})",
        (f"{DRIVER_UPGRADE_STATE_LABEL}={state}", f"waits for {DRIVER_WAITS[state]}", *job_lines),
        "wait for the walk to end (the state label goes); the node then offers no GPUs by design "
        "until the driver is enabled again",
    )


# ------------------------------------------------------------------ operands
def _operand_pods(snap: Snapshot, node: str, service: str) -> list[Obj]:
    return [
        p
        for p in snap.pods
        if namespace_of(p) == snap.namespace
        and spec_of(p).get("nodeName", "") in (node, "")
        and app_name(p) == service
        and pod_phase(p) not in ("Succeeded",)
        and _pod_targets(p, node)
    ]


def _pod_targets(pod: Obj, node: str) -> bool:
    """The pod is bound to the node, or is a pending DaemonSet pod pinned to it by node affinity."""
    if spec_of(pod).get("nodeName") == node:
        return True
    return node in json.dumps(spec_of(pod).get("affinity") or {})


def _pod_events(snap: Snapshot, pod: Obj, *reasons: str) -> list[str]:
    return [
        str(e.get("message", ""))
        for e in snap.events
        if (e.get("involvedObject") or {}).get("kind") == "Pod"
        and (e.get("involvedObject") or {}).get("name") == name_of(pod)
        and (not reasons or e.get("reason") in reasons)
    ]


def _log_lines(snap: Snapshot, pod: Obj, container: str) -> tuple[str, ...]:
    text = snap.logs.get(log_key(pod, container, True)) or snap.logs.get(log_key(pod, container, False)) or ""
    return tuple(f"log: {line}" for line in text.rstrip().splitlines()[-10:])


def paused_operands(node: Obj) -> list[str]:
    """`service=paused-for-<reason>` for each operand a walk has paused on the node."""
    return [
        f"{s}={PAUSED_PREFIX}{reason}" for s, reason in operandpause.paused_operands(labels_of(node)).items()
    ]


def _pauses(node: Obj) -> Iterator[Finding]:
    """Checked after the driver, health, remediation and partition links: a pause is what those
    walks do, so the walk (or the fault that started it) is the first broken link, not the pause."""
    paused = paused_operands(node)
    if paused:
        yield Finding(
            f.P006,
            "operands paused: " + ", ".join(paused),
            ("; ".join(f"{pause.value}: {pause.by}" for pause in operandpause.PAUSES),),
            "wait: whoever paused them sets the label back to true when done",
        )


def _operands(snap: Snapshot, node: Obj) -> Iterator[Finding]:
    name = name_of(node)
    deploy = {
        k[len(DEPLOY_LABEL_PREFIX) :]: v
        for k, v in labels_of(node).items()
        if k.startswith(DEPLOY_LABEL_PREFIX)
    }
    paused = paused_operands(node)
    problems = 0
    for service in sorted(s for s, v in deploy.items() if v == "true"):
        pods = _operand_pods(snap, name, service)
        if not pods:
            problems += 1
            yield Finding(
                f.P005,
                f"{DEPLOY_LABEL_PREFIX}{service}=true but no {service} pod on {name}",
                (f"no pod with app.kubernetes.io/name={service} in {snap.namespace} on the node",),
                f"check the DaemonSet: kubectl -n {snap.namespace} describe daemonset -l "
                f"app.kubernetes.io/name={service} (is its chart installed? do its tolerations "
                "cover the node's taints?)",
            )
        for pod in pods:
            finding = _pod_finding(snap, pod, service)
            if finding is not None:
                problems += 1
                yield finding
    if not problems and annotations_of(node).get(STAGE_ANNOTATION) == "operands-rolling" and not paused:
        yield Finding(
            f.P007,
            "the operator is still rolling out the operands",
            (f"{STAGE_ANNOTATION}=operands-rolling", "deployed: " + (", ".join(sorted(deploy)) or "none")),
            "wait: the next stage is added once every pod of the previous one is Ready",
        )


def _pod_finding(snap: Snapshot, pod: Obj, service: str) -> Finding | None:
    pod_ref = f"{namespace_of(pod)}/{name_of(pod)}"
    scheduled = condition_of(pod, "PodScheduled") or {}
    if scheduled.get("status") == "False" or not spec_of(pod).get("nodeName"):
        return Finding(
            f.P001,
            f"{service} pod {pod_ref} is not scheduled: {scheduled.get('reason') or 'Pending'}",
            (
                str(scheduled.get("message") or "no PodScheduled condition yet"),
                *_pod_events(snap, pod, "FailedScheduling")[-3:],
            ),
            f"kubectl -n {namespace_of(pod)} describe pod {name_of(pod)}: free the resources or "
            "tolerate the taints it names",
        )
    for container in status_of(pod).get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        last = (container.get("lastState") or {}).get("terminated") or {}
        reason = str(waiting.get("reason") or "")
        cname = str(container.get("name"))
        restarts = int(container.get("restartCount") or 0)
        if reason in PULL_REASONS:
            return Finding(
                f.P002,
                f"{service} pod {pod_ref}: {reason} for {container.get('image')}",
                (str(waiting.get("message") or ""),),
                "check the image name and tag (the chart's image values) and the pull secret",
            )
        if reason == "CrashLoopBackOff" or (restarts and last and not container.get("ready")):
            exit_line = (
                f"last exit: code {last.get('exitCode')} ({last.get('reason') or '?'}) "
                f"{str(last.get('message') or '').strip()[:300]}".rstrip()
            )
            return Finding(
                f.P003,
                f"{service} pod {pod_ref} container {cname} crash-loops ({restarts} restarts)",
                (exit_line, *_log_lines(snap, pod, cname)),
                f"kubectl -n {namespace_of(pod)} logs {name_of(pod)} -c {cname} --previous",
            )
    if pod_phase(pod) == "Running" and not pod_is_ready(pod):
        probes = _pod_events(snap, pod, "Unhealthy")[-3:]
        return Finding(
            f.P004,
            f"{service} pod {pod_ref} runs but is not Ready",
            tuple(probes) or ("no probe failure recorded yet: still starting",),
            f"kubectl -n {namespace_of(pod)} describe pod {name_of(pod)}; its /readyz says why",
        )
    return None


# ------------------------------------------------------------------ device plugin, health
def _allocatable(snap: Snapshot, node: Obj) -> Iterator[Finding]:
    name = name_of(node)
    plugins = [p for p in _operand_pods(snap, name, "device-plugin") if pod_is_ready(p)]
    if not plugins:
        return
    offered = gpu_allocatable(node)
    total = sum(int(v) for v in offered.values() if v.isdigit())
    counted = labels_of(node).get(GPU_COUNT_LABEL, "")
    evidence = (
        "allocatable: "
        + (
            ", ".join(f"{k}={v}" for k, v in sorted(offered.items())) or "no amd.com/ or nvidia.com/ resource"
        ),
        f"the node labeller counted {GPU_COUNT_LABEL}={counted or '(no label)'}",
        f"device plugin pod {namespace_of(plugins[0])}/{name_of(plugins[0])} is Ready (registered)",
    )
    if total == 0:
        yield Finding(
            f.R001,
            "the device plugin is Ready but the kubelet advertises no GPU",
            evidence,
            f"kubectl -n {snap.namespace} logs {name_of(plugins[0])}: it lists the devices it found and "
            "their health; no device (driver not loaded, /dev/kfd or /dev/nvidia* missing) or every "
            "device unhealthy gives zero",
        )
    elif counted.isdigit() and any(k.endswith("/gpu") for k in offered):
        whole = sum(int(v) for k, v in offered.items() if k.endswith("/gpu") and v.isdigit())
        if 0 < whole < int(counted):
            yield Finding(
                f.R002,
                f"{whole} GPUs allocatable, the labeller counted {counted}",
                evidence,
                "the device plugin marks unhealthy devices out of allocatable: see GPUHealthy and its log",
            )


def _health(node: Obj, spec: DeviceConfigSpec | None) -> Iterator[Finding]:
    condition = condition_of(node, GPU_HEALTHY_CONDITION)
    if condition is None or condition.get("status") == "True":
        return
    message = str(condition.get("message") or "")
    state = labels_of(node).get(REMEDIATION_STATE_LABEL)
    if condition.get("status") == "Unknown":
        yield Finding(
            f.H002,
            "the node labeller cannot read GPU health",
            (f"{GPU_HEALTHY_CONDITION}=Unknown {condition.get('reason', '')}: {message}",),
            "check the node labeller's log on the node",
        )
        return
    gpus = PCI_ADDRESS.findall(message)
    if state:
        next_step = f"remediation is handling it (step {state}, see GPUOP-M001/M002)"
    elif spec is not None and spec.remediation.enable:
        next_step = "remediation starts once the condition held conditionHoldSeconds"
    else:
        next_step = "enable spec.remediation, or drain the node and reset the GPU by hand"
    yield Finding(
        f.H001,
        f"GPU {', '.join(gpus) or '(unnamed)'} unhealthy: {condition.get('reason', '')}",
        (
            f"{GPU_HEALTHY_CONDITION}=False reason={condition.get('reason', '')} (signals)",
            f"message: {message}",
            f"since {condition.get('lastTransitionTime', '?')}",
        ),
        next_step,
    )


# ------------------------------------------------------------------ remediation, partitioning
def _remediation(snap: Snapshot, node: Obj) -> Iterator[Finding]:
    name = name_of(node)
    state = labels_of(node).get(REMEDIATION_STATE_LABEL, "")
    annotations = annotations_of(node)
    jobs = node_jobs(snap, name, "gpu-reset", "node-reboot")
    job_lines = tuple(f"Job {key_of(j)}: {_job_state(j)}" for j in jobs)
    if state == "failed":
        yield Finding(
            f.M002,
            "remediation failed: the node stays tainted and cordoned for a person",
            (
                f"{REMEDIATION_FAILURE_ANNOTATION}: {annotations.get(REMEDIATION_FAILURE_ANNOTATION, '')}",
                *job_lines,
            ),
            f"fix the GPU, then give the node back: kubectl label node {name} {REMEDIATION_STATE_LABEL}-",
        )
    elif state in REMEDIATION_WAITS:
        job = f" {key_of(jobs[-1])} ({_job_state(jobs[-1])})" if jobs else ""
        repair = annotations.get(REMEDIATION_REPAIR_ANNOTATION)
        yield Finding(
            f.M001,
            f"remediation step {state}" + (f" ({repair})" if repair else ""),
            (
                f"{REMEDIATION_STATE_LABEL}={state}",
                "waits for " + REMEDIATION_WAITS[state].format(node=name, job=job),
                *job_lines,
            ),
            f"wait; kubectl get events --field-selector involvedObject.name={name} shows each step",
        )


def _profiles(config: Obj) -> list[str]:
    section = spec_of(config).get("configManager") or {}
    return [str(p.get("name")) for p in section.get("profiles") or [] if isinstance(p, dict)]


def _partition(node: Obj, config: Obj, spec: DeviceConfigSpec) -> Iterator[Finding]:
    if not spec.config_manager.enable:
        return
    labels = labels_of(node)
    keys = [spec.config_manager.profile_label, *spec.config_manager.vendor_profile_labels]
    asked = next(((k, labels[k]) for k in keys if labels.get(k)), None)
    state = labels.get(CONFIG_STATE_LABEL, "")
    reason = annotations_of(node).get(CONFIG_FAILURE_ANNOTATION, "")
    known = _profiles(config)
    if asked is not None and asked[1] not in known:
        key, profile = asked
        yield Finding(
            f.C001,
            f"the node asks for partition profile {profile!r}, which {key_of(config)} does not define",
            (
                f"{key}={profile}",
                "spec.configManager.profiles: " + (", ".join(known) or "(none)"),
                *((f"{CONFIG_STATE_LABEL}={state}: {reason}",) if state else ()),
            ),
            f"kubectl label node {name_of(node)} {key}=<one of the profiles> --overwrite, or add "
            f"{profile!r} to spec.configManager.profiles",
        )
    elif state == "failed":
        yield Finding(
            f.C002,
            f"partitioning failed for profile {asked[1] if asked else '?'}",
            (f"{CONFIG_FAILURE_ANNOTATION}: {reason}",),
            "fix the cause; a changed profile or label is tried again",
        )
    elif state in ("pending", "quiescing", "applying"):
        yield Finding(
            f.C003,
            f"partitioning to {asked[1] if asked else '?'}: {state}",
            (f"{CONFIG_STATE_LABEL}={state}",),
            "wait for success; quiescing waits for GPU pods to leave the node",
        )


# ------------------------------------------------------------------ scheduling
def _scheduling(node: Obj) -> Iterator[Finding]:
    name = name_of(node)
    labels = labels_of(node)
    operator_cordon = (
        labels.get(DRIVER_UPGRADE_STATE_LABEL) in DRIVER_UPGRADE_CORDONING
        or labels.get(REMEDIATION_STATE_LABEL) in REMEDIATION_CORDONING
    )
    if spec_of(node).get("unschedulable") and not operator_cordon:
        yield Finding(
            f.T001,
            f"{name} is cordoned, and no driver upgrade or remediation of gpuop holds it",
            ("spec.unschedulable: true", "no GPU pod can be scheduled on the node"),
            f"when the maintenance is over: kubectl uncordon {name}",
        )
    remediating = labels.get(REMEDIATION_STATE_LABEL) in REMEDIATION_CORDONING
    for taint in spec_of(node).get("taints") or []:
        key = str(taint.get("key", ""))
        if taint.get("effect") not in ("NoSchedule", "NoExecute") or key.startswith(EXPLAINED_TAINTS):
            continue
        if remediating and key.startswith("gpuop.dev/"):
            continue
        yield Finding(
            f.T002,
            f"taint {key}={taint.get('value', '')}:{taint.get('effect')} keeps pods without a toleration off",
            (json.dumps(taint, sort_keys=True),),
            f"remove it (kubectl taint node {name} {key}-) or give the GPU workloads a toleration",
        )


def diagnose_all(snap: Snapshot, nodes: Sequence[str] = ()) -> list[NodeReport]:
    """Every named node, or every GPU node when none is named."""
    names = list(nodes) or sorted(name_of(n) for n in snap.gpu_nodes)
    return [diagnose(snap, name) for name in names]
