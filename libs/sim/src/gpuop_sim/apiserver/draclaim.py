"""ResourceClaim and ResourceClaimTemplate (resource.k8s.io/v1): defaults and rules.

Defaulting: a request (`exactly` or a `firstAvailable` subrequest) gets allocationMode ExactCount
and, in that mode, count 1; a toleration's operator defaults to Equal; capacity quantities come
back canonical; a claim always has `status` (an empty object before allocation).

Validation: at most 32 requests (DNS-label names, unique), each exactly one of `exactly` /
`firstAvailable` (at most 8 subrequests); deviceClassName required (a DNS subdomain); selectors
as in DeviceClass; allocationMode All forbids count, ExactCount needs count > 0; tolerations;
constraints (request references, matchAttribute or distinctAttribute fully qualified) and configs
(request references, opaque). On update the spec is immutable (not re-validated). The status:
reservedFor entries need resource, name and uid (unique) and an allocation; an allocation is
checked when first set (results name requests of the claim, driver, pool, device; config
sources) and is immutable afterwards (clearing it is allowed).
"""

from __future__ import annotations

import json
from typing import Any

from gpuop_sim.apiserver import godump, quantity, validation
from gpuop_sim.apiserver.drarules import (
    MAX_CONFIGS,
    Causes,
    JsonObj,
    RequestNames,
    as_dict,
    as_list,
    check_list,
    check_set,
    class_name,
    device_configuration,
    dns_label,
    driver_name,
    forbidden,
    fully_qualified_name,
    invalid,
    invalid_shown,
    label_name,
    label_value,
    node_selector,
    not_supported,
    pool_name,
    qualified_name,
    request_ref,
    request_refs,
    required,
    selectors,
)

MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8
MAX_CONSTRAINTS = 32
MAX_TOLERATIONS = 16
MAX_RESULTS = 32
MAX_RESERVED_FOR = 256
ALLOCATION_MODES = ("All", "ExactCount")
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")
CONFIG_SOURCES = ("FromClaim", "FromClass")


# ---------------------------------------------------------------- defaulting
def _default_request(request: JsonObj) -> None:
    request.setdefault("allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1
    for toleration in as_list(request.get("tolerations")):
        if isinstance(toleration, dict) and not toleration.get("operator"):
            toleration["operator"] = "Equal"
    capacity = as_dict(request.get("capacity"))
    if isinstance(capacity.get("requests"), dict):
        capacity["requests"] = {
            k: quantity.canonical_quantity(v) for k, v in sorted(capacity["requests"].items())
        }


def default_claim_spec(spec: Any) -> None:
    for request in as_list(as_dict(as_dict(spec).get("devices")).get("requests")):
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            _default_request(request["exactly"])
        for sub in as_list(request.get("firstAvailable")):
            if isinstance(sub, dict):
                _default_request(sub)


def default_claim(obj: JsonObj) -> None:
    default_claim_spec(obj.get("spec"))
    if not isinstance(obj.get("status"), dict):
        obj["status"] = {}
    results = as_list(as_dict(as_dict(obj["status"].get("allocation")).get("devices")).get("results"))
    for result in results:
        if isinstance(result, dict) and isinstance(result.get("consumedCapacity"), dict):
            result["consumedCapacity"] = {
                k: quantity.canonical_quantity(v) for k, v in sorted(result["consumedCapacity"].items())
            }


def default_claim_template(obj: JsonObj) -> None:
    default_claim_spec(as_dict(obj.get("spec")).get("spec"))


# ---------------------------------------------------------------- spec
def request_names(spec: Any) -> RequestNames:
    """Request name -> its subrequest names."""
    names: RequestNames = {}
    for raw in as_list(as_dict(as_dict(spec).get("devices")).get("requests")):
        request = as_dict(raw)
        if isinstance(request.get("name"), str):
            names[request["name"]] = {
                str(as_dict(s).get("name")) for s in as_list(request.get("firstAvailable"))
            }
    return names


def _toleration(field: str, toleration: Any) -> Causes:
    toleration = as_dict(toleration)
    key = toleration.get("key") or ""
    causes = label_name(f"{field}.key", key) if key else []
    operator = toleration.get("operator") or ""
    value = toleration.get("value") or ""
    if operator == "Exists":
        if value:
            causes.append(invalid(f"{field}.value", value, "must be empty for operator `Exists`"))
    elif operator == "Equal":
        causes += label_value(f"{field}.value", value)
    elif not operator:
        causes.append(required(f"{field}.operator"))
    else:
        causes.append(not_supported(f"{field}.operator", operator, TOLERATION_OPERATORS))
    effect = toleration.get("effect") or ""
    if effect and effect not in TAINT_EFFECTS:
        causes.append(not_supported(f"{field}.effect", effect, TAINT_EFFECTS))
    return causes


def _request_body(field: str, request: JsonObj) -> Causes:
    """What `exactly` and a subrequest share: class, selectors, mode and count, tolerations."""
    causes = class_name(f"{field}.deviceClassName", request.get("deviceClassName"))
    causes += selectors(f"{field}.selectors", request.get("selectors"))
    mode, count = request.get("allocationMode") or "", request.get("count") or 0
    if mode == "All":
        if count:
            causes.append(
                invalid(f"{field}.count", count, "must not be specified when allocationMode is 'All'")
            )
    elif mode == "ExactCount":
        if count <= 0:
            causes.append(invalid(f"{field}.count", count, "must be greater than zero"))
    else:
        causes.append(not_supported(f"{field}.allocationMode", mode, ALLOCATION_MODES))
    causes += check_list(
        f"{field}.tolerations", as_list(request.get("tolerations")), MAX_TOLERATIONS, _toleration
    )
    for name in as_dict(as_dict(request.get("capacity")).get("requests")):
        causes += qualified_name(f"{field}.capacity.requests", name)
    return causes


def _subrequest(field: str, sub: Any) -> Causes:
    sub = as_dict(sub)
    return dns_label(f"{field}.name", sub.get("name")) + _request_body(field, sub)


def _request(field: str, request: Any) -> Causes:
    request = as_dict(request)
    causes = dns_label(f"{field}.name", request.get("name"))
    exactly, first = request.get("exactly"), as_list(request.get("firstAvailable"))
    if exactly is None and not first:
        causes.append(required(field, "exactly one of `exactly` or `firstAvailable` is required"))
    elif exactly is not None and first:
        causes.append(
            invalid(
                field,
                None,
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
            )
        )
    elif first:
        causes += check_set(
            f"{field}.firstAvailable",
            first,
            MAX_SUBREQUESTS,
            _subrequest,
            lambda sub: as_dict(sub).get("name"),
        )
    else:
        causes += _request_body(f"{field}.exactly", as_dict(exactly))
    return causes


def _constraint(field: str, constraint: Any, names: RequestNames) -> Causes:
    constraint = as_dict(constraint)
    causes = request_refs(f"{field}.requests", constraint.get("requests"), names, MAX_REQUESTS)
    if constraint.get("matchAttribute") is not None:
        causes += fully_qualified_name(f"{field}.matchAttribute", str(constraint["matchAttribute"]))
    elif constraint.get("distinctAttribute") is not None:
        causes += fully_qualified_name(f"{field}.distinctAttribute", str(constraint["distinctAttribute"]))
    else:
        # The real wording (DRAConsumableCapacity is on by default in 1.36), odd as it reads.
        causes.append(
            required(
                field,
                'exactly one of "matchAttribute" or "distinctAttribute" is required, '
                "but multiple fields are set",
            )
        )
    return causes


def _claim_config(field: str, config: Any, names: RequestNames) -> Causes:
    config = as_dict(config)
    return request_refs(
        f"{field}.requests", config.get("requests"), names, MAX_REQUESTS
    ) + device_configuration(field, config)


def validate_claim_spec(field: str, spec: Any) -> Causes:
    devices = as_dict(as_dict(spec).get("devices"))
    path = f"{field}.devices"
    names = request_names(spec)
    causes = check_set(
        f"{path}.requests",
        as_list(devices.get("requests")),
        MAX_REQUESTS,
        _request,
        lambda r: as_dict(r).get("name"),
    )
    causes += check_list(
        f"{path}.constraints",
        as_list(devices.get("constraints")),
        MAX_CONSTRAINTS,
        lambda p, c: _constraint(p, c, names),
    )
    causes += check_list(
        f"{path}.config", as_list(devices.get("config")), MAX_CONFIGS, lambda p, c: _claim_config(p, c, names)
    )
    return causes


def validate_claim(obj: JsonObj) -> Causes:
    """Create and update of the main resource (its status is not written there)."""
    return validate_claim_spec("spec", obj.get("spec"))


def validate_claim_template(obj: JsonObj) -> Causes:
    spec = as_dict(obj.get("spec"))
    meta = as_dict(spec.get("metadata"))
    causes = validation.validate_labels(meta.get("labels"), "spec.metadata.labels")
    causes += [
        dict(c, field="spec.metadata.annotations")
        for c in validation.validate_annotations(meta.get("annotations"))
    ]
    return causes + validate_claim_spec("spec.spec", spec.get("spec"))


ADMIN_NAMESPACE_LABEL = "resource.kubernetes.io/admin-access"


def admin_access_causes(spec: Any, namespace_labels: dict[str, str]) -> Causes:
    """A request for admin access (`exactly.adminAccess: true`) needs a namespace labelled
    `resource.kubernetes.io/admin-access: "true"`. The real server names the first such request
    as `spec.devices.requests[i].adminAccess` (without `exactly`), for claims and templates."""
    for i, request in enumerate(as_list(as_dict(as_dict(spec).get("devices")).get("requests"))):
        if as_dict(as_dict(request).get("exactly")).get("adminAccess") is True:
            if namespace_labels.get(ADMIN_NAMESPACE_LABEL) == "true":
                return []
            return [
                forbidden(
                    f"spec.devices.requests[{i}].adminAccess",
                    f"admin access to devices requires the `{ADMIN_NAMESPACE_LABEL}: true` label on the "
                    "containing namespace",
                )
            ]
    return []


# ---------------------------------------------------------------- status
def semantic(value: Any) -> Any:
    """What Go's semantic equality compares: a null or empty list is the same as an absent field."""
    if isinstance(value, dict):
        return {k: semantic(v) for k, v in value.items() if v is not None and v != []}
    if isinstance(value, list):
        return [semantic(v) for v in value]
    return value


def _consumer(field: str, consumer: Any) -> Causes:
    consumer = as_dict(consumer)
    return [required(f"{field}.{key}") for key in ("resource", "name", "uid") if not consumer.get(key)]


def validate_claim_status(new: JsonObj, old: JsonObj) -> Causes:
    status = as_dict(new.get("status"))
    allocation = status.get("allocation")
    reserved = as_list(status.get("reservedFor"))
    causes = check_set(
        "status.reservedFor", reserved, MAX_RESERVED_FOR, _consumer, lambda c: as_dict(c).get("uid")
    )
    if reserved:
        if allocation is None:
            causes.append(forbidden("status.reservedFor", "may not be specified when `allocated` is not set"))
        elif "deletionTimestamp" in as_dict(new.get("metadata")):
            before = {
                json.dumps(c, sort_keys=True) for c in as_list(as_dict(old.get("status")).get("reservedFor"))
            }
            if any(json.dumps(c, sort_keys=True) not in before for c in reserved):
                causes.append(
                    forbidden(
                        "status.reservedFor",
                        "new entries may not be added while `deallocationRequested` or "
                        "`deletionTimestamp` are set",
                    )
                )
    old_allocation = as_dict(old.get("status")).get("allocation")
    if old_allocation is not None and allocation is not None:
        if semantic(allocation) != semantic(old_allocation):
            shown = godump.go_dump(allocation, "AllocationResult")
            causes.append(invalid_shown("status.allocation", shown, "field is immutable"))
    elif allocation is not None:
        causes += _allocation(as_dict(allocation), request_names(new.get("spec")))
    return causes


def _result(field: str, result: Any, names: RequestNames) -> Causes:
    result = as_dict(result)
    causes = request_ref(f"{field}.request", result.get("request") or "", names)
    causes += driver_name(f"{field}.driver", result.get("driver"))
    causes += pool_name(f"{field}.pool", result.get("pool"))
    causes += dns_label(f"{field}.device", result.get("device"))
    return causes


def _allocation_config(field: str, config: Any, names: RequestNames) -> Causes:
    config = as_dict(config)
    source = config.get("source") or ""
    causes: Causes = []
    if not source:
        causes.append(required(f"{field}.source"))
    elif source not in CONFIG_SOURCES:
        causes.append(not_supported(f"{field}.source", source, CONFIG_SOURCES))
    causes += request_refs(f"{field}.requests", config.get("requests"), names, MAX_REQUESTS)
    return causes + device_configuration(field, config)


def _allocation(allocation: JsonObj, names: RequestNames) -> Causes:
    path = "status.allocation.devices"
    devices = as_dict(allocation.get("devices"))
    causes = check_list(
        f"{path}.results", as_list(devices.get("results")), MAX_RESULTS, lambda p, r: _result(p, r, names)
    )
    causes += check_list(
        f"{path}.config",
        as_list(devices.get("config")),
        2 * MAX_CONFIGS,
        lambda p, c: _allocation_config(p, c, names),
    )
    if allocation.get("nodeSelector") is not None:
        causes += node_selector("status.allocation.nodeSelector", allocation["nodeSelector"])
    return causes


# ---------------------------------------------------------------- updates
def validate_claim_update(old: JsonObj, new: JsonObj) -> Causes:
    """A write of the main resource: only the spec's immutability is checked."""
    if semantic(as_dict(old.get("spec"))) == semantic(as_dict(new.get("spec"))):
        return []
    return [invalid_shown("spec", godump.go_dump(new.get("spec"), "ResourceClaimSpec"), "field is immutable")]


_OBJECT_META_ORDER = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
)


def _template_spec_dump(spec: JsonObj) -> str:
    """The internal ResourceClaimTemplateSpec: ObjectMeta embedded (its json names, omitempty, a
    zero creationTimestamp as null), then `Spec`."""
    meta = as_dict(spec.get("metadata"))
    shown: JsonObj = {}
    for key in _OBJECT_META_ORDER:
        if key == "creationTimestamp":
            shown[key] = meta.get(key)
        elif meta.get(key) not in (None, "", 0, [], {}):
            value = meta[key]
            shown[key] = dict(sorted(value.items())) if isinstance(value, dict) else value
    inner = godump.go_dump(spec.get("spec"), "ResourceClaimSpec")
    head = json.dumps(shown, separators=(",", ":"), ensure_ascii=False)[:-1]
    return f'{head},"Spec":{inner}}}'


def validate_claim_template_update(old: JsonObj, new: JsonObj) -> Causes:
    if semantic(as_dict(old.get("spec"))) == semantic(as_dict(new.get("spec"))):
        return []
    return [invalid_shown("spec", _template_spec_dump(as_dict(new.get("spec"))), "field is immutable")]
