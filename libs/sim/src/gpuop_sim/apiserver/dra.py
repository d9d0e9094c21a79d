"""resource.k8s.io/v1 (Dynamic Resource Allocation) as kube-apiserver 1.36 serves it.

The entry points the generic write path calls: `DEFAULTS` (create and update defaulting per
kind), `validate` (object rules) and `validate_update` (rules that compare with the stored
object). The rules themselves live in draslice.py (ResourceSlice), draclaim.py (ResourceClaim,
ResourceClaimTemplate) and drarules.py (shared: names, CEL selectors, opaque configs); this
module holds DeviceClass, whose rules are few:
- at most 32 selectors, each with a `cel` expression that compiles to bool (dracel.py);
- at most 32 configs, each `opaque` with a driver name and JSON-object parameters;
- `extendedResourceName`, when set, a valid extended resource name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpuop_sim.apiserver import draclaim, draslice, pods, validation
from gpuop_sim.apiserver.drarules import (
    MAX_CONFIGS,
    Causes,
    JsonObj,
    as_dict,
    as_list,
    check_list,
    device_configuration,
    invalid,
    selectors,
)


def validate_device_class(obj: JsonObj) -> Causes:
    spec = as_dict(obj.get("spec"))
    causes = selectors("spec.selectors", spec.get("selectors"))
    causes += check_list("spec.config", as_list(spec.get("config")), MAX_CONFIGS, device_configuration)
    name = spec.get("extendedResourceName")
    if name is not None and not _is_extended_resource_name(str(name)):
        causes.append(invalid("spec.extendedResourceName", name, "must be a valid extended resource name"))
    return causes


def _is_extended_resource_name(name: str) -> bool:
    """Not a native resource (those have no domain or a kubernetes.io one), not `requests.`, and
    `requests.<name>` a valid qualified name."""
    return pods.is_extended_resource(name) and not validation.validate_label_key("requests." + name)


def drop_nulls(value: Any) -> Any:
    """Go decodes a JSON null into an unset (omitempty) field, so it never comes back."""
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


def _defaulter(kind_defaults: Callable[[JsonObj], None] | None) -> Callable[[JsonObj], None]:
    def run(obj: JsonObj) -> None:
        for key in ("spec", "status"):
            if isinstance(obj.get(key), dict):
                obj[key] = drop_nulls(obj[key])
        if kind_defaults is not None:
            kind_defaults(obj)

    return run


DEFAULTS: dict[str, Callable[[JsonObj], None]] = {
    "DeviceClass": _defaulter(None),
    "ResourceSlice": _defaulter(lambda obj: draslice.default_slice(obj, create=True)),
    "ResourceClaim": _defaulter(draclaim.default_claim),
    "ResourceClaimTemplate": _defaulter(draclaim.default_claim_template),
}
UPDATE_DEFAULTS: dict[str, Callable[[JsonObj], None]] = {
    **DEFAULTS,
    "ResourceSlice": _defaulter(lambda obj: draslice.default_slice(obj, create=False)),
}
_VALIDATE: dict[str, Callable[[JsonObj], Causes]] = {
    "DeviceClass": validate_device_class,
    "ResourceSlice": draslice.validate_slice,
    "ResourceClaim": draclaim.validate_claim,
    "ResourceClaimTemplate": draclaim.validate_claim_template,
}


def validate(kind: str, obj: JsonObj) -> Causes:
    """Object validation of one resource.k8s.io kind (create and update)."""
    check = _VALIDATE.get(kind)
    return check(obj) if check is not None else []


def admission_causes(kind: str, obj: JsonObj, namespace_labels: dict[str, str]) -> Causes:
    """Checks that need other objects (the namespace); they come before the object's own causes."""
    if kind == "ResourceClaim":
        return draclaim.admin_access_causes(obj.get("spec"), namespace_labels)
    if kind == "ResourceClaimTemplate":
        return draclaim.admin_access_causes(as_dict(obj.get("spec")).get("spec"), namespace_labels)
    return []


def validate_update(kind: str, old: JsonObj, new: JsonObj, *, status: bool) -> Causes:
    """The rules that compare a write with the stored object (PUT or PATCH, main or /status).

    For a ResourceSlice that is its whole validation (immutable fields among the others, in the
    server's order); a claim's or template's spec is only checked for immutability."""
    if kind == "ResourceClaim":
        if status:
            return draclaim.validate_claim_status(new, old)
        return draclaim.validate_claim_update(old, new)
    if kind == "ResourceClaimTemplate" and not status:
        return draclaim.validate_claim_template_update(old, new)
    if kind == "ResourceSlice" and not status:
        return draslice.validate_slice(new, old)
    return []
