"""Defaulting and admission that kube-apiserver itself performs for built-in kinds.

Only what the real server does with its default admission plugins (TaintNodesByCondition,
ServiceAccount, DefaultTolerationSeconds, Priority, NamespaceLifecycle) and type defaulting;
controllers' behaviour lives in controllers.py.
"""

from __future__ import annotations

import copy
import random
import re
from typing import Any

from gpuop_sim.apiserver.errors import cause

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
        "ResourceClaim",
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
_NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods", "storage"})


def random_suffix(n: int = 5) -> str:
    """Name suffix like the server's generateName (consonants and digits, no vowels)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(random.choice(alphabet) for _ in range(n))


def is_extended_resource(name: str) -> bool:
    if name in _NATIVE_RESOURCES or name.startswith(("hugepages-", "requests.")):
        return False
    return "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")


def _is_integer_quantity(value: Any) -> bool:
    return isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"\d+", value) is not None)


# ---------------------------------------------------------------- per kind
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
            if is_extended_resource(name) and not _is_integer_quantity(qty):
                causes.append(
                    cause(
                        "FieldValueInvalid",
                        f'Invalid value: "{qty}": must be an integer',
                        f"status.{section}.{name}",
                    )
                )
    return causes


def _default_container(c: JsonObj) -> None:
    resources = c.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, qty in limits.items():
            requests.setdefault(name, qty)
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    image = c.get("image", "")
    tagged = ":" in image.rsplit("/", 1)[-1] or "@" in image
    latest = image.endswith(":latest") or not tagged
    c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
    for port in c.get("ports") or []:
        port.setdefault("protocol", "TCP")


def default_pod_spec(spec: JsonObj) -> None:
    """Type defaults of a PodSpec (pods and pod templates)."""
    for c in spec.get("initContainers") or []:
        _default_container(c)
    for c in spec.get("containers") or []:
        _default_container(c)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    if spec.get("serviceAccountName"):
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    for vol in spec.get("volumes") or []:
        if "configMap" in vol:
            vol["configMap"].setdefault("defaultMode", 420)
        if "secret" in vol:
            vol["secret"].setdefault("defaultMode", 420)
        if "hostPath" in vol:
            vol["hostPath"].setdefault("type", "")


def validate_pod_spec(spec: JsonObj, base: str = "spec") -> list[JsonObj]:
    causes: list[JsonObj] = []
    for group in ("initContainers", "containers"):
        for i, c in enumerate(spec.get(group) or []):
            res = c.get("resources") or {}
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            path = f"{base}.{group}[{i}].resources"
            for name in requests:
                if is_extended_resource(name) and name not in limits:
                    causes.append(
                        cause(
                            "FieldValueRequired",
                            "Required value: Limit must be set for non overcommitable resources",
                            f"{path}.limits",
                        )
                    )
            for section, values in (("limits", limits), ("requests", requests)):
                for name, qty in values.items():
                    if is_extended_resource(name) and not _is_integer_quantity(qty):
                        causes.append(
                            cause(
                                "FieldValueInvalid",
                                f'Invalid value: "{qty}": must be an integer',
                                f"{path}.{section}[{name}]",
                            )
                        )
    return causes


def admit_pod(pod: JsonObj, service_account_exists: bool) -> JsonObj | None:
    """ServiceAccount + DefaultTolerationSeconds + Priority admission, then defaults.

    Returns None when the ServiceAccount is missing (the caller answers 403)."""
    spec = pod.setdefault("spec", {})
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    if not service_account_exists:
        return None
    spec["serviceAccountName"] = sa
    spec["serviceAccount"] = sa
    if spec.get("automountServiceAccountToken") is not False and not any(
        m.get("mountPath") == "/var/run/secrets/kubernetes.io/serviceaccount"
        for c in spec.get("containers") or []
        for m in c.get("volumeMounts") or []
    ):
        vol_name = "kube-api-access-" + random_suffix()
        spec.setdefault("volumes", []).append(
            {
                "name": vol_name,
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            }
        )
        mount = {
            "name": vol_name,
            "readOnly": True,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        }
        for group in ("initContainers", "containers"):
            for c in spec.get(group) or []:
                c.setdefault("volumeMounts", []).append(dict(mount))
    default_pod_spec(spec)
    tolerations = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key and t.get("effect") in ("NoExecute", None, "") for t in tolerations):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    spec.setdefault("priority", 0)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
    return pod


def qos_class(spec: JsonObj) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        if limits or requests:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits.get(name)) != limits.get(name):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _default_template(obj: JsonObj) -> None:
    template = obj.setdefault("spec", {}).setdefault("template", {})
    default_pod_spec(template.setdefault("spec", {}))


def default_daemonset(obj: JsonObj) -> None:
    _default_template(obj)
    spec = obj["spec"]
    strategy = spec.setdefault("updateStrategy", {"type": "RollingUpdate"})
    if strategy.get("type", "RollingUpdate") == "RollingUpdate":
        strategy.setdefault("type", "RollingUpdate")
        rolling = strategy.setdefault("rollingUpdate", {})
        rolling.setdefault("maxUnavailable", 1)
        rolling.setdefault("maxSurge", 0)
    spec.setdefault("revisionHistoryLimit", 10)


def default_deployment(obj: JsonObj) -> None:
    _default_template(obj)
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
    _default_template(obj)
    spec = obj["spec"]
    spec.setdefault("replicas", 1)
    spec.setdefault("podManagementPolicy", "OrderedReady")
    spec.setdefault("updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}})
    spec.setdefault("revisionHistoryLimit", 10)
    spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})


def default_job(obj: JsonObj) -> None:
    _default_template(obj)
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
    import base64

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
