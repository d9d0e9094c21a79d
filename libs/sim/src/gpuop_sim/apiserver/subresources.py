"""Pod binding and eviction, and Namespace finalize: the action subresources."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuop_sim.apiserver import errors
from gpuop_sim.apiserver.base import now_rfc3339
from gpuop_sim.apiserver.core import ApiCore, Result, WriteOptions
from gpuop_sim.apiserver.errors import ApiError
from gpuop_sim.apiserver.resources import ResourceType
from gpuop_sim.apiserver.selectors import Requirement, labels_match
from gpuop_sim.apiserver.validation import quote

JsonObj = dict[str, Any]
_SUCCESS_201: JsonObj = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Success",
    "code": 201,
}


def _rt(core: ApiCore, plural: str, group: str = "", version: str = "v1") -> ResourceType:
    rt = core.registry.get(group, version, plural)
    assert rt is not None
    return rt


def bind_pod(core: ApiCore, ns: str, name: str, body: Any) -> Result:
    """POST pods/NAME/binding: what the scheduler does; sets spec.nodeName once."""
    pods = _rt(core, "pods")
    current = core.get(pods, ns, name)
    target = (body or {}).get("target") or {}
    node = target.get("name", "")
    assigned = (current.obj.get("spec") or {}).get("nodeName")
    if assigned:
        raise ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on pods/binding "{name}": pod '
            f'{name} is already assigned to node "{assigned}"',
            {"name": name, "kind": "pods/binding"},
        )
    pod = current.copy()
    pod["spec"]["nodeName"] = node
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    conditions.append(
        {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now_rfc3339()}
    )
    # Binding bypasses the main-resource rules (spec.nodeName is otherwise immutable, status separate).
    pod["metadata"]["resourceVersion"] = str(core.store.next_rv())
    core.store.put(pods.key, pod, created=False)
    return Result(201, dict(_SUCCESS_201))


# The audience a real API server puts in tokens nobody asked a specific audience for.
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"


def request_token(core: ApiCore, ns: str, name: str, body: Any) -> Result:
    """POST serviceaccounts/NAME/token (TokenRequest): what the kubelet asks for each pod's projected
    token. This server authenticates nobody, so the token only names its ServiceAccount and pod."""
    core.get(_rt(core, "serviceaccounts"), ns, name)  # 404 for an unknown ServiceAccount, as there
    spec = dict((body or {}).get("spec") or {})
    spec.setdefault("audiences", [API_AUDIENCE])
    seconds = int(spec.setdefault("expirationSeconds", 3600))
    bound = spec.get("boundObjectRef") or {}
    subject = f"system:serviceaccount:{ns}:{name}"
    token = f"sim.{subject}.{bound.get('kind', '')}/{bound.get('name', '')}.{uuid.uuid4().hex}"
    expires = datetime.now(UTC) + timedelta(seconds=seconds)
    return Result(
        201,
        {
            "kind": "TokenRequest",
            "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": None},
            "spec": spec,
            "status": {"token": token, "expirationTimestamp": expires.strftime("%Y-%m-%dT%H:%M:%SZ")},
        },
    )


def evict_pod(core: ApiCore, ns: str, name: str, body: Any) -> Result:
    """POST pods/NAME/eviction: delete unless a PodDisruptionBudget forbids it."""
    pods = _rt(core, "pods")
    current = core.get(pods, ns, name)
    pod = current.obj
    if (pod.get("status") or {}).get("phase") == "Running":
        pdbs = _rt(core, "poddisruptionbudgets", "policy")
        for stored in core.store.items(pdbs.key, ns):
            selector = ((stored.obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            reqs = [Requirement(k, "=", (v,)) for k, v in selector.items()]
            if not labels_match(reqs, pod):
                continue
            status = stored.obj.get("status") or {}
            pdb_name = stored.obj["metadata"]["name"]
            if status.get("observedGeneration") is None:
                raise _too_many(f"The disruption budget {pdb_name} is still being processed by the server.")
            if int(status.get("disruptionsAllowed", 0)) < 1:
                raise _too_many(
                    f"The disruption budget {pdb_name} needs "
                    f"{status.get('desiredHealthy', 0)} healthy pods and has "
                    f"{status.get('currentHealthy', 0)} currently"
                )
    options = ((body or {}).get("deleteOptions") or {}) if isinstance(body, dict) else {}
    core.delete(pods, ns, name, options)
    return Result(201, dict(_SUCCESS_201))


def _too_many(message: str) -> ApiError:
    return ApiError(
        429,
        "TooManyRequests",
        "Cannot evict pod as it would violate the pod's disruption budget.",
        {"causes": [{"reason": "DisruptionBudget", "message": message}], "retryAfterSeconds": 10},
    )


def finalize_namespace(core: ApiCore, name: str, body: Any) -> Result:
    """PUT namespaces/NAME/finalize: replace spec.finalizers; the delete completes when empty."""
    namespaces = _rt(core, "namespaces")
    current = core.get(namespaces, "", name)
    if not isinstance(body, dict):
        raise errors.bad_request("the body of a finalize request must be a Namespace")
    obj = current.copy()
    obj.setdefault("spec", {})["finalizers"] = list((body.get("spec") or {}).get("finalizers") or [])
    meta = obj["metadata"]
    if "deletionTimestamp" in meta and not obj["spec"]["finalizers"] and not meta.get("finalizers"):
        meta["resourceVersion"] = str(core.store.next_rv())
        stored = core.store.remove(namespaces.key, obj)
        return Result(200, stored.raw)
    meta["resourceVersion"] = str(core.store.next_rv())
    stored = core.store.put(namespaces.key, obj, created=False)
    return Result(200, stored.raw)


def _selector_string(obj: JsonObj) -> str:
    match = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(match.items()))


def scale_of(obj: JsonObj) -> JsonObj:
    """The autoscaling/v1 Scale view of a Deployment, ReplicaSet or StatefulSet."""
    meta = obj["metadata"]
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": {"replicas": int((obj.get("spec") or {}).get("replicas", 0))},
        "status": {
            "replicas": int((obj.get("status") or {}).get("replicas", 0)),
            "selector": _selector_string(obj),
        },
    }


def _path(json_path: str) -> list[str]:
    return [part for part in json_path.strip().lstrip(".").split(".") if part]


def _lookup(obj: Any, parts: list[str]) -> tuple[bool, Any]:
    for part in parts:
        if not isinstance(obj, dict) or part not in obj:
            return False, None
        obj = obj[part]
    return True, obj


def custom_scale_of(obj: JsonObj, paths: dict[str, str]) -> JsonObj:
    """A CR's Scale from the CRD's scale paths. The spec path must exist in the object: the real
    server answers 500 otherwise (the paths are never checked against the schema)."""
    spec_path = paths.get("specReplicasPath", "")
    found, replicas = _lookup(obj, _path(spec_path))
    if not found or not isinstance(replicas, int):
        raise errors.internal(f"the spec replicas field {quote(spec_path)} does not exist")
    _, status_replicas = _lookup(obj, _path(paths.get("statusReplicasPath", "")))
    status: JsonObj = {"replicas": status_replicas if isinstance(status_replicas, int) else 0}
    if paths.get("labelSelectorPath"):
        found, selector = _lookup(obj, _path(paths["labelSelectorPath"]))
        if found and isinstance(selector, str):
            status["selector"] = selector
    meta = obj["metadata"]
    keep = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
    return {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": {"replicas": replicas},
        "status": status,
    }


def scale_view(rt: ResourceType, obj: JsonObj) -> JsonObj:
    if rt.custom is not None and rt.custom.scale is not None:
        return custom_scale_of(obj, rt.custom.scale)
    return scale_of(obj)


def get_scale(core: ApiCore, rt: ResourceType, ns: str, name: str) -> Result:
    return Result(200, scale_view(rt, core.get(rt, ns, name).obj))


def write_scale(
    core: ApiCore, rt: ResourceType, ns: str, name: str, scale: Any, *, opts: WriteOptions
) -> Result:
    """PUT (or a patched) Scale: only spec.replicas reaches the object; a stale rv is a 409."""
    current = core.get(rt, ns, name)
    if not isinstance(scale, dict) or not isinstance((scale.get("spec") or {}).get("replicas", 0), int):
        raise errors.bad_request(
            'Scale in version "v1" cannot be handled as a Scale: spec.replicas must be an integer'
        )
    wanted_rv = (scale.get("metadata") or {}).get("resourceVersion")
    if wanted_rv and wanted_rv != current.obj["metadata"]["resourceVersion"]:
        raise errors.conflict(rt, name)
    obj = current.copy()
    replicas = int((scale.get("spec") or {}).get("replicas", 0))
    spec_path = ["spec", "replicas"]
    if rt.custom is not None and rt.custom.scale is not None:
        spec_path = _path(rt.custom.scale.get("specReplicasPath", ""))
    parent = obj
    for part in spec_path[:-1]:
        parent = parent.setdefault(part, {})
    parent[spec_path[-1]] = replicas
    core.update(rt, ns, name, obj, opts)
    return Result(200, scale_view(rt, core.get(rt, ns, name).obj))
