"""The per-node playbook Job: its manifest, its name, and what a finished one reports (pure).

One Job per node and operation, named deterministically, so a restarted operator finds (adopts) the
Job it started instead of starting a second one. The Job runs the operator's own image (or
`spec.driver.image`, which must contain the same entrypoint) as
`gpuop-operator playbook <name> --host-root /host --extra-vars-file F`. Why each privilege is there:
- `runAsUser: 0` / `runAsGroup: 0`: the operator image runs as 65532 (the operator itself stays
  non-root), and `chroot` needs CAP_SYS_CHROOT as root; `privileged` alone keeps the image's user,
  so without these the playbook's `chroot /host` fails with EPERM on a real node;
- `privileged` + the host's `/` at `/host`: the playbook installs packages, builds and loads a kernel
  module and edits the container runtime's config, all on the host (through `chroot /host`);
- `hostPID`: `systemctl` (restarting containerd, rebooting) talks to the host's systemd;
- `hostNetwork` (with `dnsPolicy: ClusterFirstWithHostNet`): inside `chroot /host`, apt/dnf/curl read
  the host's /etc/resolv.conf, which on systemd-resolved hosts names 127.0.0.53, reachable only
  from the host's network namespace;
- `nodeName` + tolerate every taint: it must run on exactly this node, even cordoned or NotReady;
- `priorityClassName` (chart value, default `system-node-critical`): a driver Job must not be
  preempted by the GPU workloads it makes room for. Outside kube-system some clusters (GKE) refuse
  that class unless a ResourceQuota allows it; the chart value then names another class, or "";
- `backoffLimit: 0`: a failed install is reported, not retried blindly (the node goes
  `upgrade-failed` until a person sets it back), `activeDeadlineSeconds` bounds a hung build,
  `ttlSecondsAfterFinished` cleans finished Jobs up.
The extra-vars file comes from a downward-API volume of the pod's own annotation: one object per
run, nothing to clean up after it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal

from gpuop_common.config.driver import DriverConfig
from pydantic import ValidationError

from gpuop_operator.jobresult import PlaybookSummary, PlaybookVars

JsonObj = dict[str, Any]
Operation = Literal["driver-install", "driver-uninstall", "node-reboot", "gpu-reset"]
COMPONENT = "driver-job"
COMPONENT_LABEL = "app.kubernetes.io/component"
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
OPERATION_LABEL = "gpuop.dev/operation"
NODE_ANNOTATION = "gpuop.dev/node"
VERSION_ANNOTATION = "gpuop.dev/driver-version"
VARS_ANNOTATION = "gpuop.dev/playbook-vars"
RUN_ANNOTATION = "gpuop.dev/remediation-run"  # the remediation run a Job belongs to (its start)
VARS_DIR = "/etc/gpuop/playbook"
OVERRIDES_DIR = "/etc/gpuop/playbook-overrides"
TERMINATION_LOG = "/dev/termination-log"
SHORT = {
    "driver-install": "driver",
    "driver-uninstall": "uninstall",
    "node-reboot": "reboot",
    "gpu-reset": "reset",
}
MAX_NAME = 63  # the Job's name is also the value of its pods' job-name label
DEFAULT_JOB_IMAGE = "ghcr.io/gpuop/gpuop-operator:latest"  # the chart passes its own image instead


@dataclass(frozen=True)
class JobSettings:
    namespace: str
    release: str
    image: str  # the operator's own image
    service_account: str = ""
    image_pull_policy: str = "IfNotPresent"
    host_exec: str | None = None  # None: the playbook's default, `chroot /host`
    overrides_config_map: str = ""  # ConfigMap of <name>.yml playbook overrides, mounted when set
    deadline_seconds: int = 3600
    ttl_seconds: int = 3600
    priority_class: str = "system-node-critical"  # "": none (see the module docstring)


def job_name(release: str, operation: Operation, node: str) -> str:
    """`<release>-<driver|reboot>-<node>`, shortened with a hash of the node name when too long."""
    base = f"{release}-{SHORT[operation]}-"
    cleaned = re.sub(r"[^a-z0-9-]", "-", node.lower())
    if len(base) + len(cleaned) <= MAX_NAME and cleaned == node:
        return base + cleaned
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    room = MAX_NAME - len(base) - len(digest) - 1
    return f"{base}{cleaned[:room].strip('-')}-{digest}"


def _pull_policy(settings: JobSettings, driver: DriverConfig) -> str:
    """`spec.driver.imagePullPolicy` when the user wrote it, else the operator's own (its field
    default cannot tell "IfNotPresent" chosen from "IfNotPresent" by default)."""
    if "image_pull_policy" in driver.model_fields_set:
        return driver.image_pull_policy
    return settings.image_pull_policy


def build_job(
    settings: JobSettings,
    operation: Operation,
    node: str,
    vendor: str,
    driver: DriverConfig,
    *,
    playbook: str = "",
    gpus: tuple[str, ...] = (),
    run: str = "",
) -> JsonObj:
    """`playbook`: what the Job runs when not the operation's own (remediation's user playbook);
    `gpus`: PCI addresses the playbook acts on; `run`: the remediation run it belongs to."""
    name = job_name(settings.release, operation, node)
    variables = PlaybookVars.model_validate(
        {"vendor": vendor, "driver": driver, "hostExec": settings.host_exec, "gpus": list(gpus)}
    )
    labels = {
        NAME_LABEL: COMPONENT,
        INSTANCE_LABEL: settings.release,
        COMPONENT_LABEL: COMPONENT,
        OPERATION_LABEL: operation,
    }
    annotations = {NODE_ANNOTATION: node, VERSION_ANNOTATION: driver.version}
    if run:
        annotations[RUN_ANNOTATION] = run
    args = [
        "playbook",
        playbook or operation,
        "--host-root",
        "/host",
        "--extra-vars-file",
        f"{VARS_DIR}/vars.json",
        "--termination-log",
        TERMINATION_LOG,
        "--timeout",
        str(max(settings.deadline_seconds - 60, 60)),
    ]
    mounts: list[JsonObj] = [
        {"name": "host", "mountPath": "/host"},
        {"name": "vars", "mountPath": VARS_DIR, "readOnly": True},
    ]
    volumes: list[JsonObj] = [
        {"name": "host", "hostPath": {"path": "/", "type": "Directory"}},
        {
            "name": "vars",
            "downwardAPI": {
                "items": [
                    {
                        "path": "vars.json",
                        "fieldRef": {"fieldPath": f"metadata.annotations['{VARS_ANNOTATION}']"},
                    }
                ]
            },
        },
    ]
    if settings.overrides_config_map:
        args += ["--overrides-dir", OVERRIDES_DIR]
        mounts.append({"name": "overrides", "mountPath": OVERRIDES_DIR, "readOnly": True})
        volumes.append({"name": "overrides", "configMap": {"name": settings.overrides_config_map}})
    pod_spec: JsonObj = {
        "nodeName": node,
        "restartPolicy": "Never",
        "hostPID": True,
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "tolerations": [{"operator": "Exists"}],
        "containers": [
            {
                "name": "playbook",
                "image": driver.image or settings.image,
                "imagePullPolicy": _pull_policy(settings, driver),
                "args": args,
                "securityContext": {"privileged": True, "runAsUser": 0, "runAsGroup": 0},
                "terminationMessagePath": TERMINATION_LOG,
                "terminationMessagePolicy": "FallbackToLogsOnError",
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }
    if settings.priority_class:
        pod_spec["priorityClassName"] = settings.priority_class
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    vars_json = variables.model_dump_json(by_alias=True, exclude_none=True)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": settings.deadline_seconds,
            "ttlSecondsAfterFinished": settings.ttl_seconds,
            "template": {
                "metadata": {"labels": labels, "annotations": {**annotations, VARS_ANNOTATION: vars_json}},
                "spec": pod_spec,
            },
        },
    }


JobPhase = Literal["running", "succeeded", "failed"]


@dataclass(frozen=True)
class JobView:
    """A driver Job as the driver lifecycle sees it."""

    name: str
    uid: str
    node: str
    operation: str
    version: str
    phase: JobPhase
    reason: str = ""  # the Failed condition's reason (BackoffLimitExceeded, DeadlineExceeded)
    message: str = ""
    deleting: bool = False
    run: str = ""  # remediation run id, "" for driver Jobs
    image: str = ""  # the image its pod template runs
    # Its pod cannot pull `image` (kubelet waiting reason and message): the pod stays Pending and
    # the Job active until its activeDeadlineSeconds, so this is the only prompt sign.
    pull_reason: str = ""
    pull_message: str = ""

    @property
    def pulling(self) -> bool:
        return self.phase == "running" and bool(self.pull_reason) and not self.deleting

    def pull_problem(self, field: str, *, detail: bool = True) -> str:
        """What a person reads: the Job, the image, the kubelet's reason, the field to fix. Without
        `detail` (for the DeviceConfig's condition) it leaves out the kubelet's reason, which
        alternates ErrImagePull / ImagePullBackOff at every pull and would rewrite it each time."""
        why = f"{self.pull_reason}: {self.pull_message}" if self.pull_message else self.pull_reason
        shown = f" ({why})" if detail else ""
        return (
            f"{self.operation} Job {self.name} on node {self.node} cannot pull image {self.image!r}"
            f"{shown}; set {field} to an image the node can pull"
        )


def job_view(obj: JsonObj) -> JobView | None:
    """None for a Job that is not one of ours."""
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    if labels.get(COMPONENT_LABEL) != COMPONENT or not annotations.get(NODE_ANNOTATION):
        return None
    phase: JobPhase = "running"
    reason = message = ""
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            phase = "succeeded"
        elif condition.get("type") == "Failed":
            phase, reason, message = (
                "failed",
                str(condition.get("reason", "")),
                str(condition.get("message", "")),
            )
    return JobView(
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        node=str(annotations[NODE_ANNOTATION]),
        operation=str(labels.get(OPERATION_LABEL, "")),
        version=str(annotations.get(VERSION_ANNOTATION, "")),
        phase=phase,
        reason=reason,
        message=message,
        deleting="deletionTimestamp" in meta,
        run=str(annotations.get(RUN_ANNOTATION, "")),
        image=template_image(obj),
    )


PULL_CONDITION_REASON = "JobImagePullFailed"  # the DeviceConfig's Degraded reason


def image_field(driver_image: str) -> str:
    """The setting that chooses a per-node Job's image, as a person edits it."""
    if driver_image:
        return "spec.driver.image"
    return "spec.driver.image (empty: the Job runs the operator's own image)"


def superseded(job: JobView, wanted_image: str) -> bool:
    """A Job stuck pulling an image that is no longer the one its field names: the person fixed
    the field, so it is replaced (a Job's pod template cannot be changed)."""
    return job.pulling and bool(wanted_image) and bool(job.image) and job.image != wanted_image


def template_image(job: JsonObj) -> str:
    """The image of the Job's (single) container."""
    template = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = template.get("containers") or [{}]
    return str(containers[0].get("image") or "")


def trim_job(obj: JsonObj) -> JsonObj:
    """What the operator's Job cache keeps."""
    meta = obj.get("metadata") or {}
    kept = {
        k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp") if k in meta
    }
    kept["labels"] = {
        k: v
        for k, v in (meta.get("labels") or {}).items()
        if k in (COMPONENT_LABEL, OPERATION_LABEL, NAME_LABEL)
    }
    kept["annotations"] = {
        k: v
        for k, v in (meta.get("annotations") or {}).items()
        if k in (NODE_ANNOTATION, VERSION_ANNOTATION, RUN_ANNOTATION)
    }
    conditions = [
        {k: c.get(k) for k in ("type", "status", "reason", "message")}
        for c in (obj.get("status") or {}).get("conditions") or []
    ]
    image = template_image(obj)
    spec = {"template": {"spec": {"containers": [{"image": image}]}}} if image else {}
    return {"metadata": kept, "spec": spec, "status": {"conditions": conditions}}


def summary_of_pod(pod: JsonObj) -> PlaybookSummary | None:
    """The playbook summary the Job's container left as its termination message; None when it left
    none or something else (a log tail from FallbackToLogsOnError, a crash before the summary)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        message = terminated.get("message") or ""
        if not message.strip().startswith("{"):
            continue
        try:
            return PlaybookSummary.model_validate(json.loads(message))
        except (ValueError, ValidationError):
            continue
    return None


def log_tail_of_pod(pod: JsonObj) -> str:
    """The termination message when it is not a summary (the kubelet's log fallback), for Events."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated") or {}
        message = str(terminated.get("message") or "")
        if message and not message.strip().startswith("{"):
            return message[-400:]
    return ""
