"""The resource table: which kinds the simulator serves, and how discovery describes them.

Built-in entries mirror what kube-apiserver 1.36 lists in its discovery documents (verbs, short
names, categories, subresources); custom resources are added when a CRD is established.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass, field
from typing import Any

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
# The verb order a CRD-backed resource reports in discovery (differs from built-ins).
CRD_VERBS = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")
SUB_RW = ("get", "patch", "update")


@dataclass(frozen=True)
class Subresource:
    name: str
    kind: str
    verbs: tuple[str, ...] = SUB_RW
    # Set only when the subresource answers with a kind from another API group (Scale, Eviction).
    group: str | None = None
    version: str | None = None


@dataclass(frozen=True)
class CustomInfo:
    """What a CRD adds to its resource: schema, status subresource, selectable fields, columns."""

    schema: dict[str, Any]
    status_subresource: bool
    selectable_fields: tuple[str, ...] = ()
    printer_columns: tuple[dict[str, Any], ...] = ()
    crd_name: str = ""
    # subresources.scale: specReplicasPath, statusReplicasPath, labelSelectorPath (JSON paths).
    scale: dict[str, str] | None = None


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[Subresource, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    singular: str = ""
    # Kinds stored under another group's type (events.k8s.io Events are core Events in etcd).
    storage_group: str | None = None
    custom: CustomInfo | None = field(default=None, compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: objects of one (group, plural) share one map regardless of version."""
        return (self.group, self.plural)

    @property
    def qualified_plural(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def singular_name(self) -> str:
        return self.singular or self.kind.lower()

    def has_status(self) -> bool:
        return any(s.name == "status" for s in self.subresources)

    def subresource(self, name: str) -> Subresource | None:
        return next((s for s in self.subresources if s.name == name), None)

    def storage_version_hash(self) -> str:
        group = self.group if self.storage_group is None else self.storage_group
        digest = hashlib.sha256(f"{group}/{self.version}/{self.kind}".encode()).digest()
        return base64.b64encode(digest[:8]).decode()


def _rt(
    group: str,
    version: str,
    plural: str,
    kind: str,
    namespaced: bool = True,
    *,
    short: tuple[str, ...] = (),
    cats: tuple[str, ...] = (),
    subs: tuple[Subresource, ...] = (),
    verbs: tuple[str, ...] = ALL_VERBS,
    storage_group: str | None = None,
) -> ResourceType:
    return ResourceType(group, version, plural, kind, namespaced, short, cats, subs, verbs, "", storage_group)


def _status(kind: str) -> Subresource:
    return Subresource("status", kind)


def _scale() -> Subresource:
    return Subresource("scale", "Scale", SUB_RW, "autoscaling", "v1")


_NS_CLUSTER = False
BUILTIN_RESOURCES: tuple[ResourceType, ...] = (
    # core/v1
    _rt("", "v1", "bindings", "Binding", verbs=("create",)),
    _rt("", "v1", "configmaps", "ConfigMap", short=("cm",)),
    _rt("", "v1", "endpoints", "Endpoints", short=("ep",)),
    _rt("", "v1", "events", "Event", short=("ev",)),
    _rt("", "v1", "limitranges", "LimitRange", short=("limits",)),
    _rt(
        "",
        "v1",
        "namespaces",
        "Namespace",
        _NS_CLUSTER,
        short=("ns",),
        subs=(Subresource("finalize", "Namespace", ("update",)), _status("Namespace")),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    _rt(
        "",
        "v1",
        "nodes",
        "Node",
        _NS_CLUSTER,
        short=("no",),
        subs=(
            Subresource("proxy", "NodeProxyOptions", ("create", "delete", "get", "patch", "update")),
            _status("Node"),
        ),
    ),
    _rt(
        "",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        short=("pvc",),
        subs=(_status("PersistentVolumeClaim"),),
    ),
    _rt(
        "",
        "v1",
        "persistentvolumes",
        "PersistentVolume",
        _NS_CLUSTER,
        short=("pv",),
        subs=(_status("PersistentVolume"),),
    ),
    _rt(
        "",
        "v1",
        "pods",
        "Pod",
        short=("po",),
        cats=("all",),
        subs=(
            Subresource("attach", "PodAttachOptions", ("create", "get")),
            Subresource("binding", "Binding", ("create",)),
            Subresource("ephemeralcontainers", "Pod", SUB_RW),
            Subresource("eviction", "Eviction", ("create",), "policy", "v1"),
            Subresource("exec", "PodExecOptions", ("create", "get")),
            Subresource("log", "Pod", ("get",)),
            Subresource("portforward", "PodPortForwardOptions", ("create", "get")),
            Subresource("proxy", "PodProxyOptions", ("create", "delete", "get", "patch", "update")),
            Subresource("resize", "Pod", SUB_RW),
            _status("Pod"),
        ),
    ),
    _rt("", "v1", "podtemplates", "PodTemplate"),
    _rt(
        "",
        "v1",
        "replicationcontrollers",
        "ReplicationController",
        short=("rc",),
        cats=("all",),
        subs=(_scale(), _status("ReplicationController")),
    ),
    _rt("", "v1", "resourcequotas", "ResourceQuota", short=("quota",), subs=(_status("ResourceQuota"),)),
    _rt("", "v1", "secrets", "Secret"),
    _rt(
        "",
        "v1",
        "serviceaccounts",
        "ServiceAccount",
        short=("sa",),
        subs=(Subresource("token", "TokenRequest", ("create",), "authentication.k8s.io", "v1"),),
    ),
    _rt(
        "",
        "v1",
        "services",
        "Service",
        short=("svc",),
        cats=("all",),
        subs=(
            Subresource("proxy", "ServiceProxyOptions", ("create", "delete", "get", "patch", "update")),
            _status("Service"),
        ),
    ),
    # apps/v1
    _rt("apps", "v1", "controllerrevisions", "ControllerRevision"),
    _rt("apps", "v1", "daemonsets", "DaemonSet", short=("ds",), cats=("all",), subs=(_status("DaemonSet"),)),
    _rt(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        short=("deploy",),
        cats=("all",),
        subs=(_scale(), _status("Deployment")),
    ),
    _rt(
        "apps",
        "v1",
        "replicasets",
        "ReplicaSet",
        short=("rs",),
        cats=("all",),
        subs=(_scale(), _status("ReplicaSet")),
    ),
    _rt(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        short=("sts",),
        cats=("all",),
        subs=(_scale(), _status("StatefulSet")),
    ),
    # events.k8s.io/v1 (stored as core Events by the real server; kept separate here)
    _rt("events.k8s.io", "v1", "events", "Event", short=("ev",), storage_group=""),
    # autoscaling
    _rt(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        short=("hpa",),
        cats=("all",),
        subs=(_status("HorizontalPodAutoscaler"),),
    ),
    # batch/v1
    _rt("batch", "v1", "cronjobs", "CronJob", short=("cj",), cats=("all",), subs=(_status("CronJob"),)),
    _rt("batch", "v1", "jobs", "Job", cats=("all",), subs=(_status("Job"),)),
    # networking
    _rt("networking.k8s.io", "v1", "ingressclasses", "IngressClass", _NS_CLUSTER),
    _rt("networking.k8s.io", "v1", "ingresses", "Ingress", short=("ing",), subs=(_status("Ingress"),)),
    _rt("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", short=("netpol",)),
    # policy/v1
    _rt(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        short=("pdb",),
        subs=(_status("PodDisruptionBudget"),),
    ),
    # rbac
    _rt("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", _NS_CLUSTER),
    _rt("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", _NS_CLUSTER),
    _rt("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    _rt("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    # storage
    _rt("storage.k8s.io", "v1", "csidrivers", "CSIDriver", _NS_CLUSTER),
    _rt("storage.k8s.io", "v1", "storageclasses", "StorageClass", _NS_CLUSTER, short=("sc",)),
    # admissionregistration
    _rt(
        "admissionregistration.k8s.io",
        "v1",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        _NS_CLUSTER,
    ),
    _rt(
        "admissionregistration.k8s.io",
        "v1",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        _NS_CLUSTER,
    ),
    # apiextensions
    _rt(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        _NS_CLUSTER,
        short=("crd", "crds"),
        cats=("api-extensions",),
        subs=(_status("CustomResourceDefinition"),),
    ),
    # scheduling
    _rt("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", _NS_CLUSTER, short=("pc",)),
    # coordination
    _rt("coordination.k8s.io", "v1", "leases", "Lease"),
    # node
    _rt("node.k8s.io", "v1", "runtimeclasses", "RuntimeClass", _NS_CLUSTER),
    # discovery
    _rt("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
    # resource.k8s.io (DRA)
    _rt("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", _NS_CLUSTER),
    _rt("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", subs=(_status("ResourceClaim"),)),
    _rt("resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate"),
    _rt("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", _NS_CLUSTER),
)

# The order kube-apiserver 1.36 lists built-in groups in /apis; custom groups follow.
GROUP_ORDER = (
    "apiregistration.k8s.io",
    "apps",
    "events.k8s.io",
    "authentication.k8s.io",
    "authorization.k8s.io",
    "autoscaling",
    "batch",
    "certificates.k8s.io",
    "networking.k8s.io",
    "policy",
    "rbac.authorization.k8s.io",
    "storage.k8s.io",
    "admissionregistration.k8s.io",
    "apiextensions.k8s.io",
    "scheduling.k8s.io",
    "coordination.k8s.io",
    "node.k8s.io",
    "discovery.k8s.io",
    "resource.k8s.io",
    "flowcontrol.apiserver.k8s.io",
)


class ResourceRegistry:
    """Lookup of served resources by (group, version, plural); CRDs register and unregister here."""

    def __init__(self) -> None:
        self._by_gvr: dict[tuple[str, str, str], ResourceType] = {}
        self._custom_groups: list[str] = []
        for rt in BUILTIN_RESOURCES:
            self._by_gvr[(rt.group, rt.version, rt.plural)] = rt

    def get(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._by_gvr.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceType | None:
        group, _, version = api_version.rpartition("/")
        return next(
            (
                rt
                for rt in self._by_gvr.values()
                if rt.group == group and rt.version == version and rt.kind == kind
            ),
            None,
        )

    def all(self) -> list[ResourceType]:
        return list(self._by_gvr.values())

    def register(self, rts: list[ResourceType]) -> None:
        for rt in rts:
            self._by_gvr[(rt.group, rt.version, rt.plural)] = rt
            if rt.group not in self._custom_groups and rt.group not in GROUP_ORDER:
                self._custom_groups.append(rt.group)

    def unregister(self, group: str, plural: str) -> None:
        for gvr in [k for k in self._by_gvr if k[0] == group and k[2] == plural and self._by_gvr[k].custom]:
            del self._by_gvr[gvr]
        if group in self._custom_groups and not any(g == group for g, _, _ in self._by_gvr):
            self._custom_groups.remove(group)

    def groups(self) -> list[tuple[str, list[str]]]:
        """Served (group, [versions]) pairs in discovery order, the core group excluded."""
        versions: dict[str, list[str]] = {}
        for g, v, _ in self._by_gvr:
            if g and v not in versions.setdefault(g, []):
                versions[g].append(v)
        order = [g for g in GROUP_ORDER if g in versions] + [g for g in self._custom_groups if g in versions]
        return [(g, versions[g]) for g in order]

    def resources_in(self, group: str, version: str) -> list[ResourceType]:
        rts = [rt for (g, v, _), rt in self._by_gvr.items() if g == group and v == version]
        return sorted(rts, key=lambda rt: rt.plural)

    def find_by_name(self, group: str, version: str, name: str) -> ResourceType | None:
        """Look up by plural, singular or short name (what kubectl resolves via discovery)."""
        for rt in self.resources_in(group, version):
            if name in (rt.plural, rt.singular_name, *rt.short_names):
                return rt
        return None
