"""Per-kind facts the generic write path needs: top-level fields, defaulting hooks, update rules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuop_sim.apiserver import admission, dra, pods

JsonObj = dict[str, Any]

_BASE = frozenset({"apiVersion", "kind", "metadata"})
_SPEC_STATUS = _BASE | {"spec", "status"}

# Top-level fields each built-in kind declares; anything else is an "unknown field".
TOP_LEVEL_FIELDS: dict[str, frozenset[str]] = {
    "ConfigMap": _BASE | {"data", "binaryData", "immutable"},
    "Secret": _BASE | {"data", "stringData", "type", "immutable"},
    "ServiceAccount": _BASE | {"secrets", "imagePullSecrets", "automountServiceAccountToken"},
    "Endpoints": _BASE | {"subsets"},
    "Binding": _BASE | {"target"},
    "Eviction": _BASE | {"deleteOptions"},
    "ControllerRevision": _BASE | {"data", "revision"},
    "Role": _BASE | {"rules"},
    "ClusterRole": _BASE | {"rules", "aggregationRule"},
    "RoleBinding": _BASE | {"subjects", "roleRef"},
    "ClusterRoleBinding": _BASE | {"subjects", "roleRef"},
    "PriorityClass": _BASE | {"value", "globalDefault", "description", "preemptionPolicy"},
    "StorageClass": _BASE
    | {
        "provisioner",
        "parameters",
        "reclaimPolicy",
        "mountOptions",
        "allowVolumeExpansion",
        "volumeBindingMode",
        "allowedTopologies",
    },
    "RuntimeClass": _BASE | {"handler", "overhead", "scheduling"},
    "EndpointSlice": _BASE | {"addressType", "endpoints", "ports"},
    "MutatingWebhookConfiguration": _BASE | {"webhooks"},
    "ValidatingWebhookConfiguration": _BASE | {"webhooks"},
    "Event": _BASE
    | {
        "involvedObject",
        "reason",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
        "type",
        "eventTime",
        "series",
        "action",
        "related",
        "reportingComponent",
        "reportingInstance",
        # events.k8s.io/v1 field names
        "reportingController",
        "regarding",
        "note",
        "deprecatedSource",
        "deprecatedFirstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedCount",
    },
}


def top_level_fields(kind: str) -> frozenset[str]:
    return TOP_LEVEL_FIELDS.get(kind, _SPEC_STATUS)


def _ns(obj: JsonObj, _ctx: CreateContext) -> None:
    admission.default_namespace(obj)


def _node(obj: JsonObj, _ctx: CreateContext) -> None:
    admission.default_node_create(obj)


def _ds(obj: JsonObj, _ctx: CreateContext) -> None:
    admission.default_daemonset(obj)
    obj["status"] = {
        "currentNumberScheduled": 0,
        "numberMisscheduled": 0,
        "desiredNumberScheduled": 0,
        "numberReady": 0,
    }


def _deploy(obj: JsonObj, _ctx: CreateContext) -> None:
    admission.default_deployment(obj)
    obj["status"] = {}


def _rs(obj: JsonObj, _ctx: CreateContext) -> None:
    admission.default_template(obj)
    obj["spec"].setdefault("replicas", 1)
    obj["status"] = {"replicas": 0}


def _sts(obj: JsonObj, _ctx: CreateContext) -> None:
    admission.default_statefulset(obj)
    obj["status"] = {"replicas": 0, "availableReplicas": 0}


def _job(obj: JsonObj, _ctx: CreateContext) -> None:
    admission.default_job(obj)
    obj["status"] = {}


def _svc(obj: JsonObj, ctx: CreateContext) -> None:
    admission.default_service(obj, ctx.allocate_ip())


def _secret(obj: JsonObj, _ctx: CreateContext) -> None:
    admission.default_secret(obj)


def _event(obj: JsonObj, ctx: CreateContext) -> None:
    if ctx.group == "events.k8s.io":
        admission.default_events_v1(obj)
    else:
        admission.default_core_event(obj)


def _pdb(obj: JsonObj, _ctx: CreateContext) -> None:
    admission.default_pdb(obj)


def _pc(obj: JsonObj, _ctx: CreateContext) -> None:
    admission.default_priority_class(obj)


def _dra(obj: JsonObj, ctx: CreateContext) -> None:
    if ctx.group == "resource.k8s.io":
        dra.DEFAULTS[obj["kind"]](obj)


class CreateContext:
    """What create-time defaulting may need from the server (group, IP allocation)."""

    def __init__(self, group: str, allocate_ip: Callable[[], str]) -> None:
        self.group = group
        self.allocate_ip = allocate_ip


CREATE_DEFAULTS: dict[str, Callable[[JsonObj, CreateContext], None]] = {
    "Namespace": _ns,
    "Node": _node,
    "DaemonSet": _ds,
    "Deployment": _deploy,
    "ReplicaSet": _rs,
    "StatefulSet": _sts,
    "Job": _job,
    "Service": _svc,
    "Secret": _secret,
    "Event": _event,
    "PodDisruptionBudget": _pdb,
    "PriorityClass": _pc,
    **{kind: _dra for kind in dra.DEFAULTS},
}

# Kinds whose status can be written on create (the kubelet registers Nodes with status).
STATUS_ON_CREATE = frozenset({"Node"})
# Built-ins where PUT of a missing object creates it.
CREATE_ON_UPDATE = frozenset({"Endpoints", "Event", "LimitRange"})
# MicroTime fields per kind, which must carry exactly 6 fractional digits.
MICROTIME_FIELDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "Lease": (("spec", "acquireTime"), ("spec", "renewTime")),
    "Event": (("eventTime",),),
}


_POD_ADMITTED_FIELDS = (
    "serviceAccountName",
    "serviceAccount",
    "priority",
    "enableServiceLinks",
    "preemptionPolicy",
    "schedulerName",
    "securityContext",
    "dnsPolicy",
    "restartPolicy",
    "terminationGracePeriodSeconds",
)


def default_on_update(kind: str, old: JsonObj, new: JsonObj) -> None:
    """Defaults that also apply to updates (the server re-defaults every write)."""
    if kind == "DaemonSet":
        admission.default_daemonset(new)
    elif kind == "Deployment":
        admission.default_deployment(new)
    elif kind == "StatefulSet":
        admission.default_statefulset(new)
    elif kind == "Node":
        admission.default_node_status(new)
    elif kind == "Namespace":
        meta = new.setdefault("metadata", {})
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta.get("name", "")
        new.setdefault("spec", {}).setdefault(
            "finalizers", (old.get("spec") or {}).get("finalizers", ["kubernetes"])
        )
    elif kind in dra.DEFAULTS and new.get("apiVersion", "").startswith("resource.k8s.io/"):
        dra.UPDATE_DEFAULTS[kind](new)
    elif kind == "Pod":
        spec = new.setdefault("spec", {})
        old_spec = old.get("spec") or {}
        # Fields set by defaulting or admission at create come back the same way on update.
        for key in _POD_ADMITTED_FIELDS:
            if key in old_spec:
                spec.setdefault(key, old_spec[key])
        pods.default_pod_spec(spec)
