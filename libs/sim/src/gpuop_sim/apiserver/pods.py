"""Pod admission and defaults: ServiceAccount token projection, default tolerations, PodSpec
defaults (also for pod templates), extended-resource rules and the QoS class."""

from __future__ import annotations

import random
import re
from typing import Any

from gpuop_sim.apiserver.errors import cause

JsonObj = dict[str, Any]
_NATIVE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods", "storage"})


def random_suffix(n: int = 5) -> str:
    """Name suffix like the server's generateName (consonants and digits, no vowels)."""
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(random.choice(alphabet) for _ in range(n))


def is_extended_resource(name: str) -> bool:
    if name in _NATIVE_RESOURCES or name.startswith(("hugepages-", "requests.")):
        return False
    return "/" in name and not name.split("/", 1)[0].endswith("kubernetes.io")


def is_integer_quantity(value: Any) -> bool:
    return isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"\d+", value) is not None)


# ---------------------------------------------------------------- per kind
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
    if spec.get("hostNetwork"):
        # The pod shares the node's network: each container port is also the host port.
        for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            for port in c.get("ports") or []:
                if not port.get("hostPort"):
                    port["hostPort"] = port.get("containerPort")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    # ClusterFirst also with hostNetwork (the kubelet then resolves as Default), as the real server.
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
                    if is_extended_resource(name) and not is_integer_quantity(qty):
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


POD_UPDATE_FORBIDDEN = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
    "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was "
    "previously negative)"
)


def _mutable_stripped(spec: JsonObj) -> JsonObj:
    out = {
        k: v
        for k, v in spec.items()
        if k not in ("activeDeadlineSeconds", "tolerations", "terminationGracePeriodSeconds")
    }
    for group in ("containers", "initContainers"):
        if isinstance(out.get(group), list):
            out[group] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c for c in out[group]
            ]
    return out


def validate_pod_status_update(old: JsonObj, new: JsonObj) -> list[JsonObj]:
    """The QoS class is the server's, computed at create: no status write may change it."""
    before = (old.get("status") or {}).get("qosClass", "")
    after = (new.get("status") or {}).get("qosClass", "")
    if before == after:
        return []
    return [cause("FieldValueInvalid", f'Invalid value: "{after}": field is immutable', "status.qosClass")]


def validate_pod_update(old: JsonObj, new: JsonObj) -> list[JsonObj]:
    """A Pod's spec is immutable apart from images, deadlines and added tolerations."""
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    old_tol = old_spec.get("tolerations") or []
    new_tol = new_spec.get("tolerations") or []
    removed_toleration = any(t not in new_tol for t in old_tol)
    if _mutable_stripped(old_spec) != _mutable_stripped(new_spec) or removed_toleration:
        return [cause("FieldValueForbidden", POD_UPDATE_FORBIDDEN, "spec")]
    return []
