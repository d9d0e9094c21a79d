"""Small, pure helpers over Kubernetes objects held as plain JSON dicts (the accessors from gpuop_common).

The simulator's controllers and kubelets work on the JSON the API server returns (no generated
models): it is what the wire carries, it is cheap at 1,000 nodes and it keeps fields we do not model.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from gpuop_common.kubeobj import (
    Obj,
    annotations_of,
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

# The plain accessors are gpuop_common's (kubectl gpuop reads objects the same way); re-exported here
# for the simulator's modules.
__all__ = [
    "Obj",
    "annotations_of",
    "key_of",
    "labels_of",
    "meta",
    "name_of",
    "namespace_of",
    "node_is_ready",
    "pod_is_ready",
    "pod_phase",
    "spec_of",
    "status_of",
]

# Label the real DaemonSet/ReplicaSet controllers put on pods to tell template revisions apart.
REVISION_HASH_LABEL = "controller-revision-hash"
POD_TEMPLATE_HASH_LABEL = "pod-template-hash"


def is_deleting(obj: Obj) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def owner_reference(owner: Obj) -> Obj:
    """A controller ownerReference to `owner`, as the built-in controllers write it."""
    return {
        "apiVersion": owner.get("apiVersion", ""),
        "kind": owner.get("kind", ""),
        "name": name_of(owner),
        "uid": meta(owner).get("uid", ""),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controller_uid(obj: Obj) -> str | None:
    """uid of the object's controlling owner, if any."""
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("uid", ""))
    return None


def controller_kind(obj: Obj) -> str | None:
    for ref in meta(obj).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            return str(ref.get("kind", ""))
    return None


def template_hash(template: Obj) -> str:
    """Stable short hash of a pod template: equal templates give equal hashes across restarts."""
    canonical = json.dumps(template, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:10]


def selector_matches(selector: Obj | None, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels + matchExpressions) against a label map.

    An empty or missing selector matches everything, as in the API.
    """
    if not selector:
        return True
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != str(value):
            return False
    for expr in selector.get("matchExpressions") or []:
        key = expr.get("key", "")
        values = [str(v) for v in expr.get("values") or []]
        operator = expr.get("operator", "")
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def pod_is_terminal(pod: Obj) -> bool:
    return pod_phase(pod) in ("Succeeded", "Failed")


def int_or_percent(value: Any, total: int, default: int, *, round_up: bool) -> int:
    """Resolve an IntOrString like `maxUnavailable: 25%` against `total`."""
    if value is None:
        return default
    if isinstance(value, int):
        return max(value, 0)
    text = str(value).strip()
    if text.endswith("%"):
        try:
            percent = int(text[:-1])
        except ValueError:
            return default
        scaled = total * percent
        return (scaled + 99) // 100 if round_up else scaled // 100
    try:
        return max(int(text), 0)
    except ValueError:
        return default
