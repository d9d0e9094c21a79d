"""The three PATCH formats a real kube-apiserver accepts (apply lives in ssa.py).

Pure functions over JSON values. The strategic-merge rules are the subset of Kubernetes'
`patchMergeKey`/`patchStrategy` tags that the resources we simulate use; lists without a merge key
are replaced wholesale, as on the real server.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

JsonObj = dict[str, Any]

# Lists merged by a key field (patchStrategy=merge, patchMergeKey=<key>) in built-in types.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",
    "ownerReferences": "uid",
    "addresses": "type",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "readinessGates": "conditionType",
}
# Lists of scalars merged as sets (patchStrategy=merge without a key).
MERGE_SCALAR_LISTS = frozenset({"finalizers"})
# Per-kind overrides: Service ports are keyed by `port`, not `containerPort`; a ResourceClaim's
# `status.reservedFor` is merged by consumer uid.
KIND_MERGE_KEYS: dict[str, dict[str, str]] = {
    "Service": {"ports": "port"},
    "ResourceClaim": {"reservedFor": "uid"},
}


class PatchError(ValueError):
    """A patch that cannot be applied (422 on the real server)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: JsonObj, ops: Any) -> JsonObj:
    """RFC 6902 JSON patch; a failed `test` or a bad path is a PatchError."""
    if not isinstance(ops, list):
        raise PatchError("json patch must be a list of operations")
    try:
        result: JsonObj = jsonpatch.JsonPatch(ops).apply(target)
    except (
        jsonpatch.JsonPatchException,
        jsonpatch.JsonPointerException,
        TypeError,
        KeyError,
        IndexError,
    ) as exc:
        raise PatchError(str(exc)) from exc
    return result


def strategic_merge_patch(target: JsonObj, patch: JsonObj, kind: str) -> JsonObj:
    """Kubernetes strategic merge patch for built-in kinds."""
    keys = {**MERGE_KEYS, **KIND_MERGE_KEYS.get(kind, {})}
    result = _smp_map(target, patch, keys)
    return result if isinstance(result, dict) else {}


def _smp_map(target: Any, patch: JsonObj, keys: dict[str, str]) -> Any:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$patch", "$retainKeys"):
            continue  # ordering hints and directives handled above carry no content
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            merged = _smp_map(result.get(key), value, keys)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _smp_list(key, result.get(key), value, keys)
        else:
            result[key] = copy.deepcopy(value)
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _smp_list(field: str, target: Any, patch: list[Any], keys: dict[str, str]) -> list[Any]:
    current = list(target) if isinstance(target, list) else []
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [copy.deepcopy(p) for p in patch if not (isinstance(p, dict) and p.get("$patch") == "replace")]
    if field in MERGE_SCALAR_LISTS:
        return current + [p for p in patch if p not in current]
    merge_key = keys.get(field)
    if merge_key is None or not all(isinstance(p, dict) for p in patch):
        return [copy.deepcopy(p) for p in patch]
    for item in patch:
        key_value = item.get(merge_key)
        index = next(
            (i for i, c in enumerate(current) if isinstance(c, dict) and c.get(merge_key) == key_value), None
        )
        if item.get("$patch") == "delete":
            if index is not None:
                current.pop(index)
            continue
        if index is None:
            current.append(_smp_map({}, item, keys))
        else:
            current[index] = _smp_map(current[index], item, keys)
    return current
