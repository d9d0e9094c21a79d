"""`kubectl gpuop must-gather`: one tar.gz a support engineer can read without cluster access.

What goes in: the DeviceConfigs, the GPU nodes (labels, annotations, conditions, allocatable), the
operand pods with their current and previous logs, Events of the gpuop namespace and the GPU nodes,
summaries of the driver and remediation Jobs, the operator's metrics, the doctor's report, and
`unreadable.txt` listing what this user could not read. What never goes in: Secrets (never read),
ServiceAccount tokens, kubeconfigs, and env values of any variable whose name says it is a secret.
"""

from __future__ import annotations

import io
import json
import re
import tarfile
import time
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpuop_common.kubejson import KubeJson
from gpuop_common.kubeobj import Obj, annotations_of, labels_of, name_of, namespace_of, spec_of, status_of
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from gpuop_kubectl.doctor import diagnose_all, node_jobs
from gpuop_kubectl.report import render_reports
from gpuop_kubectl.snapshot import Snapshot, read_log

SECRET_NAME = re.compile(r"token|secret|password|passwd|credential|key|cert", re.IGNORECASE)
OPERATOR_APP = "operator"
METRICS_PORT = 8080
REDACTED = "<redacted>"


def redact_pod(pod: Obj) -> Obj:
    """The pod without managedFields, and with the value of any env var named like a secret removed."""
    pod = json.loads(json.dumps(pod))
    pod.get("metadata", {}).pop("managedFields", None)
    for container in (spec_of(pod).get("containers") or []) + (spec_of(pod).get("initContainers") or []):
        for env in container.get("env") or []:
            if "value" in env and SECRET_NAME.search(str(env.get("name", ""))):
                env["value"] = REDACTED
    return pod


def node_summary(node: Obj) -> Obj:
    status = status_of(node)
    return {
        "name": name_of(node),
        "labels": labels_of(node),
        "annotations": annotations_of(node),
        "unschedulable": bool(spec_of(node).get("unschedulable")),
        "taints": spec_of(node).get("taints") or [],
        "conditions": status.get("conditions") or [],
        "capacity": status.get("capacity") or {},
        "allocatable": status.get("allocatable") or {},
        "nodeInfo": status.get("nodeInfo") or {},
    }


def job_summary(job: Obj) -> Obj:
    status = status_of(job)
    return {
        "name": name_of(job),
        "namespace": namespace_of(job),
        "labels": labels_of(job),
        "annotations": {k: v for k, v in annotations_of(job).items() if k != "gpuop.dev/playbook-vars"},
        "conditions": status.get("conditions") or [],
        "active": status.get("active", 0),
        "succeeded": status.get("succeeded", 0),
        "failed": status.get("failed", 0),
        "startTime": status.get("startTime"),
        "completionTime": status.get("completionTime"),
    }


def operator_metrics(api: client.CoreV1Api, snap: Snapshot) -> str:
    """The operator's /metrics: through the API server's pod proxy (what works from outside the
    cluster), else straight from the pod IP (inside the pod network, and on the simulator)."""
    pods = [
        p
        for p in snap.pods
        if namespace_of(p) == snap.namespace and labels_of(p).get("app.kubernetes.io/name") == OPERATOR_APP
    ]
    for pod in pods:
        try:
            text = api.connect_get_namespaced_pod_proxy_with_path(
                f"{name_of(pod)}:{METRICS_PORT}", snap.namespace, "metrics", _request_timeout=10
            )
            return str(text)
        except (ApiException, HTTPError) as error:
            snap.note(f"proxy to {snap.namespace}/{name_of(pod)}:{METRICS_PORT}/metrics", error)
        address = status_of(pod).get("podIP")
        if address:
            try:
                with urllib.request.urlopen(f"http://{address}:{METRICS_PORT}/metrics", timeout=5) as answer:
                    return str(answer.read().decode(errors="replace"))
            except OSError as error:
                snap.note(f"http://{address}:{METRICS_PORT}/metrics", error)
    if not pods:
        snap.unreadable.append(f"operator metrics: no operator pod in {snap.namespace}")
    return ""


def bundle_files(kube: KubeJson, snap: Snapshot) -> dict[str, str]:
    """Path in the bundle -> content (pure but for the log and metrics reads)."""
    api = client.CoreV1Api(kube.api_client)
    gpu_nodes = snap.gpu_nodes
    gpu_names = {name_of(n) for n in gpu_nodes}
    files: dict[str, str] = {
        "deviceconfigs.json": _json([_without_managed(c) for c in snap.deviceconfigs]),
        "nodes.json": _json([node_summary(n) for n in gpu_nodes]),
        "jobs.json": _json([job_summary(j) for n in sorted(gpu_names) for j in node_jobs(snap, n)]),
        "events.json": _json(
            [
                _without_managed(e)
                for e in snap.events
                if namespace_of(e) == snap.namespace
                or (e.get("involvedObject") or {}).get("name") in gpu_names
            ]
        ),
    }
    operands = [p for p in snap.pods if namespace_of(p) == snap.namespace]
    files["pods.json"] = _json([redact_pod(p) for p in operands])
    for pod in operands:
        for container in spec_of(pod).get("containers") or []:
            cname = str(container.get("name"))
            for previous in (False, True):
                if previous and not _restarted(pod, cname):
                    continue
                text = read_log(api, snap, pod, cname, previous=previous, tail=2000)
                suffix = ".previous.log" if previous else ".log"
                files[f"logs/{name_of(pod)}/{cname}{suffix}"] = text
    files["operator-metrics.txt"] = operator_metrics(api, snap)
    reports = diagnose_all(snap)
    files["doctor.txt"] = render_reports(reports, snap)
    files["doctor.json"] = _json([r.to_json() for r in reports])
    files["unreadable.txt"] = "\n".join(dict.fromkeys(snap.unreadable)) + "\n"
    return files


def _restarted(pod: Obj, container: str) -> bool:
    return any(
        c.get("name") == container and (c.get("lastState") or {}).get("terminated")
        for c in status_of(pod).get("containerStatuses") or []
    )


def _without_managed(obj: Obj) -> Obj:
    obj = dict(obj)
    obj["metadata"] = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return obj


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str) + "\n"


def write_bundle(path: Path, files: Mapping[str, str], root: str = "gpuop-must-gather") -> Path:
    now = time.time()
    with tarfile.open(path, "w:gz") as tar:
        for name, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size, info.mtime, info.mode = len(data), int(now), 0o644
            tar.addfile(info, io.BytesIO(data))
    return path
