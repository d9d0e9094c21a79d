"""Defaulting and admission that kube-apiserver itself performs for built-in kinds.

Only what the real server does with its default admission plugins (TaintNodesByCondition,
ServiceAccount, DefaultTolerationSeconds, Priority, NamespaceLifecycle) and type defaulting;
controllers' behaviour lives in controllers.py.
"""

from __future__ import annotations

import base64
import copy
import json
import re
from typing import Any

from gpuop_sim.apiserver.errors import cause
from gpuop_sim.apiserver.pods import default_pod_spec, is_extended_resource, is_integer_quantity

JsonObj = dict[str, Any]

# Kinds whose metadata.generation the server maintains (spec-bearing workload/policy kinds).
GENERATION_KINDS = frozenset(
    {
        "Pod",
        "DaemonSet",
        "Deployment",
        "ReplicaSet",
        "StatefulSet",
        "Job",
        "CronJob",
        "PodDisruptionBudget",
        "CustomResourceDefinition",
        "NetworkPolicy",
        "Ingress",
        "HorizontalPodAutoscaler",
        "ReplicationController",
        "DeviceClass",
        "ResourceSlice",
    }
)

NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
_NODE_INFO_KEYS = (
    "machineID",
    "systemUUID",
    "bootID",
    "kernelVersion",
    "osImage",
    "containerRuntimeVersion",
    "kubeletVersion",
    "kubeProxyVersion",
    "operatingSystem",
    "architecture",
)


def default_namespace(obj: JsonObj) -> None:
    meta = obj.setdefault("metadata", {})
    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
    spec = obj.setdefault("spec", {})
    spec.setdefault("finalizers", ["kubernetes"])
    obj["status"] = {"phase": "Active"}


def default_node_create(obj: JsonObj) -> None:
    spec = obj.setdefault("spec", {})
    taints = spec.setdefault("taints", [])
    if not any(t.get("key") == NOT_READY_TAINT["key"] and t.get("effect") == "NoSchedule" for t in taints):
        taints.append(dict(NOT_READY_TAINT))
    default_node_status(obj)


def default_node_status(obj: JsonObj) -> None:
    status = obj.setdefault("status", {})
    status.setdefault("daemonEndpoints", {}).setdefault("kubeletEndpoint", {}).setdefault("Port", 0)
    info = status.setdefault("nodeInfo", {})
    for key in _NODE_INFO_KEYS:
        info.setdefault(key, "")
    if "capacity" in status and "allocatable" not in status:
        status["allocatable"] = copy.deepcopy(status["capacity"])


def validate_node(obj: JsonObj) -> list[JsonObj]:
    causes: list[JsonObj] = []
    status = obj.get("status") or {}
    for section in ("capacity", "allocatable"):
        for name, qty in (status.get(section) or {}).items():
            if is_extended_resource(name) and not is_integer_quantity(qty):
                causes.append(
                    cause(
                        "FieldValueInvalid",
                        f'Invalid value: "{qty}": must be an integer',
                        f"status.{section}.{name}",
                    )
                )
    return causes


def default_template(obj: JsonObj) -> None:
    template = obj.setdefault("spec", {}).setdefault("template", {})
    default_pod_spec(template.setdefault("spec", {}))


def default_daemonset(obj: JsonObj) -> None:
    default_template(obj)
    spec = obj["spec"]
    strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("type", "RollingUpdate")
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", 1)
        rolling.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)


def default_deployment(obj: JsonObj) -> None:
    default_template(obj)
    spec = obj["spec"]
    spec.setdefault("replicas", 1)
    strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("type", "RollingUpdate")
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", "25%")
        rolling.setdefault("maxSurge", "25%")
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("progressDeadlineSeconds", 600)


def default_statefulset(obj: JsonObj) -> None:
    default_template(obj)
    spec = obj["spec"]
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})


def default_job(obj: JsonObj) -> None:
    default_template(obj)
    spec = obj["spec"]
    spec.setdefault("parallelism", 1)
    spec.setdefault("completions", 1)
    spec.setdefault("backoffLimit", 6)
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("suspend", False)
    spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    spec.setdefault("manualSelector", None)
    if spec.get("manualSelector") is None:
        spec.pop("manualSelector")
        uid = obj["metadata"]["uid"]
        labels = {
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": obj["metadata"]["name"],
            "controller-uid": uid,
            "job-name": obj["metadata"]["name"],
        }
        spec.setdefault("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}})
        tmeta = spec["template"].setdefault("metadata", {})
        tmeta.setdefault("labels", {}).update(labels)


def default_service(obj: JsonObj, allocate_ip: str) -> None:
    spec = obj.setdefault("spec", {})
    spec.setdefault("type", "ClusterIP")
    if spec.get("clusterIP") != "None" and spec["type"] != "ExternalName":
        spec.setdefault("clusterIP", allocate_ip)
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
    spec.setdefault("sessionAffinity", "None")
    if spec["type"] != "ExternalName":
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
    for port in spec.get("ports") or []:
        port.setdefault("protocol", "TCP")
        port.setdefault("targetPort", port.get("port"))
    obj["status"] = {"loadBalancer": {}}


def default_secret(obj: JsonObj) -> None:
    obj.setdefault("type", "Opaque")
    string_data = obj.pop("stringData", None)
    if isinstance(string_data, dict):
        data = obj.setdefault("data", {})
        for key, value in string_data.items():
            data[key] = base64.b64encode(str(value).encode()).decode()


def default_core_event(obj: JsonObj) -> None:
    obj.setdefault("eventTime", None)
    obj.setdefault("reportingComponent", "")
    obj.setdefault("reportingInstance", "")


def validate_core_event(obj: JsonObj) -> list[JsonObj]:
    ns = obj.get("metadata", {}).get("namespace", "")
    inv = obj.get("involvedObject") or {}
    if inv.get("namespace") and inv["namespace"] != ns:
        return [
            cause(
                "FieldValueInvalid",
                f'Invalid value: "{inv["namespace"]}": does not match event.namespace',
                "involvedObject.namespace",
            )
        ]
    return []


def default_events_v1(obj: JsonObj) -> None:
    obj.setdefault("deprecatedSource", {})
    obj.setdefault("deprecatedFirstTimestamp", None)
    obj.setdefault("deprecatedLastTimestamp", None)


def validate_events_v1(obj: JsonObj) -> list[JsonObj]:
    causes: list[JsonObj] = []
    if not obj.get("eventTime"):
        causes.append(cause("FieldValueRequired", "Required value", "eventTime"))
    etype = obj.get("type", "")
    if etype not in ("Normal", "Warning"):
        causes.append(cause("FieldValueInvalid", f'Invalid value: "": has invalid value: {etype}', "type"))
    for field in ("reportingController", "reportingInstance", "action", "reason"):
        if not obj.get(field) and not causes:
            causes.append(cause("FieldValueRequired", "Required value", field))
    return causes


_MICROTIME_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")


def microtime_error(value: Any) -> str | None:
    """Go's MicroTime parse error for a non-6-digit-fraction timestamp (None when valid)."""
    if value is None or (isinstance(value, str) and _MICROTIME_RE.match(value)):
        return None
    text = str(value)
    m = re.match(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}", text)
    rest = text[m.end() :] if m else text
    return f'parsing time "{text}" as "2006-01-02T15:04:05.000000Z07:00": cannot parse "{rest}" as ".000000"'


def default_pdb(obj: JsonObj) -> None:
    obj["status"] = {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}


def default_priority_class(obj: JsonObj) -> None:
    obj.setdefault("preemptionPolicy", "PreemptLowerPriority")


# Fields a workload's update may not change (the real server's "field is immutable").
IMMUTABLE_SPEC_FIELDS: dict[str, tuple[str, ...]] = {
    "DaemonSet": ("selector",),
    "Deployment": ("selector",),
    "ReplicaSet": ("selector",),
    "StatefulSet": ("selector", "serviceName", "volumeClaimTemplates", "podManagementPolicy"),
    "Job": ("selector", "template", "completionMode"),
    "PersistentVolumeClaim": ("storageClassName", "volumeName"),
}


def validate_immutable(kind: str, old: JsonObj, new: JsonObj) -> list[JsonObj]:
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    causes: list[JsonObj] = []
    for field in IMMUTABLE_SPEC_FIELDS.get(kind, ()):
        if old_spec.get(field) != new_spec.get(field):
            shown = json.dumps(new_spec.get(field), separators=(",", ":"), sort_keys=True)
            causes.append(
                cause("FieldValueInvalid", f"Invalid value: {shown}: field is immutable", f"spec.{field}")
            )
    if kind in ("ConfigMap", "Secret") and old.get("immutable") is True:
        for field in ("data", "binaryData", "immutable"):
            if old.get(field) != new.get(field):
                causes.append(
                    cause(
                        "FieldValueForbidden", "Forbidden: field is immutable when `immutable` is set", field
                    )
                )
    return causes
