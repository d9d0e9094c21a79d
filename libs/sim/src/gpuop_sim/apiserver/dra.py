"""resource.k8s.io/v1 (Dynamic Resource Allocation): defaulting and validation as kube-apiserver 1.36.

Pure functions on JSON objects. `default_*` mutate in place (run on create and update);
`validate_*` return lists of cause dicts with the real server's reasons, messages and field paths.

Rules implemented (from the v1 API documentation and the recorded server answers):
- DeviceClass: at most 32 selectors and 32 configs; each selector needs `cel`, whose expression
  (at most 10 KiB) must compile in the DRA CEL environment and evaluate to bool (dracel.py).
- ResourceSlice: `driver` a DNS subdomain of at most 63 characters; `pool.name` one or more DNS
  subdomains separated by '/', at most 253; `pool.generation` >= 0, `pool.resourceSliceCount` > 0;
  exactly one of nodeName / nodeSelector / allNodes / perDeviceNodeSelection; at most 128 devices
  (64 when a device has taints or consumes counters) with unique DNS-label names; per device at
  most 32 attributes and capacities together, names a C identifier (at most 32) optionally behind
  a DNS domain and '/', exactly one value per attribute, strings and versions at most 64, versions
  semver 2.0.0; capacity quantities canonicalized; driver, pool name and nodeName immutable.
- ResourceClaim(Template): at most 32 requests with unique DNS-label names; each exactly one of
  `exactly` / `firstAvailable` (at most 8 subrequests); deviceClassName required; allocationMode
  defaults to ExactCount and count to 1 (ExactCount needs count > 0, All forbids it); selectors as
  in DeviceClass; constraints and configs reference existing requests; `matchAttribute` fully
  qualified; the spec is immutable; `status` is always present; `status.allocation` can be set
  once (then immutable) and its results must name requests of the claim.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gpuop_sim.apiserver import dracel, godump, quantity, validation
from gpuop_sim.apiserver.errors import cause

JsonObj = dict[str, Any]

MAX_SELECTORS = 32
MAX_CONFIGS = 32
MAX_REQUESTS = 32
MAX_SUBREQUESTS = 8
MAX_CONSTRAINTS = 32
MAX_TOLERATIONS = 16
MAX_TAINTS = 16
MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_SHARED_COUNTERS = 8
MAX_RESULTS = 32
MAX_RESERVED_FOR = 256
MAX_CEL_LENGTH = 10 * 1024
MAX_DRIVER_NAME = 63
MAX_POOL_NAME = 253
MAX_ATTRIBUTE_VALUE = 64
MAX_C_IDENTIFIER = 32
MAX_OPAQUE_PARAMETERS = 10 * 1024
ALLOCATION_MODES = ("All", "ExactCount")
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")
CONFIG_SOURCES = ("FromClaim", "FromClass")
NODE_SELECTION = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
# Alpha (DRAListTypeAttributes, off by default): dropped on create like any disabled field.
LIST_ATTRIBUTE_FIELDS = ("bools", "ints", "strings", "versions")

_C_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
C_IDENTIFIER_MSG = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
    f"validation is '{_C_IDENTIFIER}')"
)
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+([0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*))?"
)
REQUEST_REF_MSG = (
    "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"
)


# ---------------------------------------------------------------- cause helpers
def _invalid(field: str, value: Any, msg: str) -> JsonObj:
    return cause("FieldValueInvalid", f"Invalid value: {validation.quote(value)}: {msg}", field)


def _invalid_raw(field: str, shown: str, msg: str) -> JsonObj:
    return cause("FieldValueInvalid", f"Invalid value: {shown}: {msg}", field)


def _required(field: str, detail: str = "") -> JsonObj:
    return cause("FieldValueRequired", "Required value" + (f": {detail}" if detail else ""), field)


def _too_many(field: str, count: int, limit: int) -> JsonObj:
    return cause("FieldValueTooMany", f"Too many: {count}: must have at most {limit} items", field)


def _too_long(field: str, limit: int) -> JsonObj:
    return cause("FieldValueTooLong", f"Too long: may not be more than {limit} bytes", field)


def _duplicate(field: str, value: Any) -> JsonObj:
    return cause("FieldValueDuplicate", f"Duplicate value: {validation.quote(value)}", field)


def _not_supported(field: str, value: Any, supported: tuple[str, ...]) -> JsonObj:
    allowed = ", ".join(validation.quote(s) for s in supported)
    return cause(
        "FieldValueNotSupported",
        f"Unsupported value: {validation.quote(value)}: supported values: {allowed}",
        field,
    )


def _forbidden(field: str, detail: str) -> JsonObj:
    return cause("FieldValueForbidden", f"Forbidden: {detail}", field)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> JsonObj:
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------- names
def _subdomain_causes(field: str, value: str) -> list[JsonObj]:
    if not re.fullmatch(validation._DNS1123_SUBDOMAIN, value):
        return [_invalid(field, value, validation.SUBDOMAIN_MSG)]
    return []


def validate_driver_name(field: str, driver: Any) -> list[JsonObj]:
    if not driver:
        return [_required(field)]
    causes: list[JsonObj] = []
    if len(driver) > MAX_DRIVER_NAME:
        causes.append(_too_long(field, MAX_DRIVER_NAME))
    if not re.fullmatch(validation._DNS1123_SUBDOMAIN, driver.lower()):
        causes.append(_invalid(field, driver, validation.SUBDOMAIN_MSG))
    return causes


def validate_pool_name(field: str, name: Any) -> list[JsonObj]:
    if not name:
        return [_required(field)]
    causes: list[JsonObj] = []
    if len(name) > MAX_POOL_NAME:
        causes.append(_too_long(field, MAX_POOL_NAME))
    for part in name.split("/"):
        causes += _subdomain_causes(field, part)
    return causes


def validate_dns_label(field: str, name: Any) -> list[JsonObj]:
    if not name:
        return [_required(field)]
    if len(name) > 63:
        return [_invalid(field, name, "must be no more than 63 characters")]
    if not re.fullmatch(validation._DNS1123_LABEL, name):
        return [_invalid(field, name, validation.LABEL_NAME_MSG)]
    return []


def validate_class_name(field: str, name: Any) -> list[JsonObj]:
    if not name:
        return [_required(field)]
    return validation.validate_name(name, "DeviceClass", field)


def _c_identifier(field: str, ident: str) -> list[JsonObj]:
    causes: list[JsonObj] = []
    if len(ident) > MAX_C_IDENTIFIER:
        causes.append(_too_long(field, MAX_C_IDENTIFIER))
    if not re.fullmatch(_C_IDENTIFIER, ident):
        causes.append(_invalid(field, ident, C_IDENTIFIER_MSG))
    return causes


def validate_qualified_name(field: str, name: str) -> list[JsonObj]:
    """An attribute or capacity name: a C identifier, optionally `<DNS domain>/` in front."""
    if not name:
        return [_required(field, "name required")]
    parts = name.split("/")
    if len(parts) == 1:
        return _c_identifier(field, name)
    if len(parts) > 2:
        return [
            _invalid(
                field,
                name,
                "must be either a C identifier or a domain and a C identifier separated by a slash",
            )
        ]
    domain, ident = parts
    causes = (
        validate_driver_name(field, domain) if domain else [_required(field, "the domain must not be empty")]
    )
    causes += _c_identifier(field, ident) if ident else [_required(field, "the name must not be empty")]
    return causes


def validate_fully_qualified_name(field: str, name: str) -> list[JsonObj]:
    causes = validate_qualified_name(field, name)
    if "/" not in name:
        causes.append(_required(field, "a fully qualified attribute name must include a domain"))
    return causes


# ---------------------------------------------------------------- selectors and configs
def validate_selectors(field: str, selectors: Any) -> list[JsonObj]:
    items = _list(selectors)
    if len(items) > MAX_SELECTORS:
        return [_too_many(field, len(items), MAX_SELECTORS)]
    causes: list[JsonObj] = []
    for i, selector in enumerate(items):
        cel_sel = _dict(selector).get("cel")
        path = f"{field}[{i}].cel"
        if cel_sel is None:
            causes.append(_required(path))
            continue
        expression = _dict(cel_sel).get("expression") or ""
        path += ".expression"
        if not expression:
            causes.append(_required(path))
        elif len(expression.encode()) > MAX_CEL_LENGTH:
            causes.append(_too_long(path, MAX_CEL_LENGTH))
        else:
            problem = dracel.selector_problem(expression)
            if problem:
                causes.append(_invalid(path, expression, problem))
    return causes


def _validate_opaque(field: str, config: JsonObj) -> list[JsonObj]:
    opaque = config.get("opaque")
    if opaque is None:
        return [_required(f"{field}.opaque")]
    causes = validate_driver_name(f"{field}.opaque.driver", _dict(opaque).get("driver"))
    params = _dict(opaque).get("parameters")
    if params is None:
        causes.append(_required(f"{field}.opaque.parameters"))
    elif len(json.dumps(params, separators=(",", ":"))) > MAX_OPAQUE_PARAMETERS:
        causes.append(_too_long(f"{field}.opaque.parameters", MAX_OPAQUE_PARAMETERS))
    return causes


def _validate_request_refs(field: str, refs: Any, names: dict[str, set[str]]) -> list[JsonObj]:
    causes: list[JsonObj] = []
    seen: set[str] = set()
    for i, ref in enumerate(_list(refs)):
        path = f"{field}[{i}]"
        main, slash, sub = str(ref).partition("/")
        if main not in names or (slash and sub not in names[main]):
            causes.append(_invalid(path, ref, REQUEST_REF_MSG))
        if ref in seen:
            causes.append(_duplicate(path, ref))
        seen.add(ref)
    return causes


# ---------------------------------------------------------------- DeviceClass
def validate_device_class(obj: JsonObj) -> list[JsonObj]:
    spec = _dict(obj.get("spec"))
    causes = validate_selectors("spec.selectors", spec.get("selectors"))
    configs = _list(spec.get("config"))
    if len(configs) > MAX_CONFIGS:
        causes.append(_too_many("spec.config", len(configs), MAX_CONFIGS))
    else:
        for i, config in enumerate(configs):
            causes += _validate_opaque(f"spec.config[{i}]", _dict(config))
    return causes


# ---------------------------------------------------------------- ResourceSlice
def default_slice(obj: JsonObj) -> None:
    """Canonical quantities, Go's sorted map keys, and the disabled alpha list attributes dropped."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for device in _list(spec.get("devices")):
        if not isinstance(device, dict):
            continue
        attributes = device.get("attributes")
        if isinstance(attributes, dict):
            for value in attributes.values():
                if isinstance(value, dict):
                    for key in LIST_ATTRIBUTE_FIELDS:
                        value.pop(key, None)
            device["attributes"] = dict(sorted(attributes.items()))
        capacity = device.get("capacity")
        if isinstance(capacity, dict):
            for value in capacity.values():
                _canonical_capacity(value)
            device["capacity"] = dict(sorted(capacity.items()))
        for consumption in _list(device.get("consumesCounters")):
            _canonical_counters(_dict(consumption))
    for counter_set in _list(spec.get("sharedCounters")):
        _canonical_counters(_dict(counter_set))


def _canonical_capacity(capacity: Any) -> None:
    if not isinstance(capacity, dict):
        return
    if "value" in capacity:
        capacity["value"] = quantity.canonical_quantity(capacity["value"])
    policy = capacity.get("requestPolicy")
    if isinstance(policy, dict):
        if "default" in policy:
            policy["default"] = quantity.canonical_quantity(policy["default"])
        if isinstance(policy.get("validValues"), list):
            policy["validValues"] = [quantity.canonical_quantity(v) for v in policy["validValues"]]
        valid_range = policy.get("validRange")
        if isinstance(valid_range, dict):
            for key in ("min", "max", "step"):
                if key in valid_range:
                    valid_range[key] = quantity.canonical_quantity(valid_range[key])


def _canonical_counters(holder: JsonObj) -> None:
    counters = holder.get("counters")
    if isinstance(counters, dict):
        for counter in counters.values():
            if isinstance(counter, dict) and "value" in counter:
                counter["value"] = quantity.canonical_quantity(counter["value"])
        holder["counters"] = dict(sorted(counters.items()))


def _node_selector_causes(field: str, selector: Any) -> list[JsonObj]:
    terms = _dict(selector).get("nodeSelectorTerms")
    if len(_list(terms)) != 1:
        shown = godump.go_dump(_dict(selector), "NodeSelector")
        inner = shown[len('{"NodeSelectorTerms":') : -1]
        return [_invalid_raw(f"{field}.nodeSelectorTerms", inner, "must have exactly one node selector term")]
    return []


def _validate_attribute(field: str, attribute: Any) -> list[JsonObj]:
    value = _dict(attribute)
    causes: list[JsonObj] = []
    present = [key for key in ("int", "bool", "string", "version") if value.get(key) is not None]
    if isinstance(value.get("string"), str) and len(value["string"]) > MAX_ATTRIBUTE_VALUE:
        causes.append(_too_long(f"{field}.string", MAX_ATTRIBUTE_VALUE))
    version = value.get("version")
    if isinstance(version, str):
        if not _SEMVER.fullmatch(version):
            causes.append(
                _invalid(
                    f"{field}.version", version, "must be a string compatible with semver.org spec 2.0.0"
                )
            )
        if len(version) > MAX_ATTRIBUTE_VALUE:
            causes.append(_too_long(f"{field}.version", MAX_ATTRIBUTE_VALUE))
    if not present:
        causes.append(_required(field, "exactly one value must be specified"))
    elif len(present) > 1:
        causes.append(
            _invalid_raw(
                field, godump.go_dump(value, "DeviceAttribute"), "exactly one value must be specified"
            )
        )
    return causes


def _validate_device(field: str, device: JsonObj, per_device_selection: bool) -> list[JsonObj]:
    causes = validate_dns_label(f"{field}.name", device.get("name"))
    attributes, capacity = _dict(device.get("attributes")), _dict(device.get("capacity"))
    combined = len(attributes) + len(capacity)
    if combined > MAX_ATTRIBUTES_AND_CAPACITIES:
        causes.append(
            _invalid(
                field,
                combined,
                "the total number of attributes and capacities must not exceed "
                f"{MAX_ATTRIBUTES_AND_CAPACITIES}",
            )
        )
    for name, attribute in attributes.items():
        causes += validate_qualified_name(f"{field}.attributes", name)
        causes += _validate_attribute(f"{field}.attributes[{name}]", attribute)
    for name in capacity:
        causes += validate_qualified_name(f"{field}.capacity", name)
    taints = _list(device.get("taints"))
    if len(taints) > MAX_TAINTS:
        causes.append(_too_many(f"{field}.taints", len(taints), MAX_TAINTS))
    for i, taint in enumerate(taints):
        causes += _validate_taint(f"{field}.taints[{i}]", _dict(taint))
    selection = [
        key for key in ("nodeName", "nodeSelector", "allNodes") if device.get(key) not in (None, "", False)
    ]
    if per_device_selection:
        if not selection:
            causes.append(
                _required(
                    field,
                    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when "
                    "`perDeviceNodeSelection` is set to true in the ResourceSlice spec",
                )
            )
        elif len(selection) > 1:
            shown = "{" + ", ".join(f"`{s}`" for s in selection) + "}"
            causes.append(
                _invalid(
                    field,
                    shown,
                    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required, "
                    "but multiple fields are set",
                )
            )
    else:
        for key in selection:
            causes.append(
                _forbidden(
                    f"{field}.{key}",
                    "must not be set when `perDeviceNodeSelection` is not set to true "
                    "in the ResourceSlice spec",
                )
            )
    if device.get("nodeName"):
        causes += validation.validate_name(device["nodeName"], "Node", f"{field}.nodeName")
    if device.get("nodeSelector") is not None:
        causes += _node_selector_causes(f"{field}.nodeSelector", device["nodeSelector"])
    return causes


def _validate_taint(field: str, taint: JsonObj) -> list[JsonObj]:
    key = taint.get("key") or ""
    causes = (
        [dict(c, field=f"{field}.key") for c in validation.validate_label_key(key)]
        if key
        else [_required(f"{field}.key")]
    )
    effect = taint.get("effect") or ""
    if not effect:
        causes.append(_required(f"{field}.effect"))
    elif effect not in TAINT_EFFECTS:
        causes.append(_not_supported(f"{field}.effect", effect, TAINT_EFFECTS))
    return causes


def validate_slice(obj: JsonObj) -> list[JsonObj]:
    spec = _dict(obj.get("spec"))
    causes = validate_driver_name("spec.driver", spec.get("driver"))
    pool = _dict(spec.get("pool"))
    causes += validate_pool_name("spec.pool.name", pool.get("name"))
    generation, count = pool.get("generation") or 0, pool.get("resourceSliceCount") or 0
    if generation < 0:
        causes.append(_invalid("spec.pool.generation", generation, "must be greater than or equal to zero"))
    if count <= 0:
        causes.append(_invalid("spec.pool.resourceSliceCount", count, "must be greater than zero"))
    per_device = spec.get("perDeviceNodeSelection")
    selection = [
        key
        for key in NODE_SELECTION
        if not (spec.get(key) in (None, "") or (key == "allNodes" and spec.get(key) is False))
    ]
    if per_device is False:
        causes.append(_invalid("spec.perDeviceNodeSelection", False, "must be either unset or set to true"))
        selection.remove("perDeviceNodeSelection")
    if not selection:
        causes.append(
            _required(
                "spec",
                "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required",
            )
        )
    elif len(selection) > 1:
        shown = "{" + ", ".join(f"`{s}`" for s in selection) + "}"
        causes.append(
            _invalid(
                "spec",
                shown,
                "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` "
                "is required, "
                "but multiple fields are set",
            )
        )
    if spec.get("nodeName"):
        causes += validation.validate_name(spec["nodeName"], "Node", "spec.nodeName")
    if spec.get("nodeSelector") is not None:
        causes += _node_selector_causes("spec.nodeSelector", spec["nodeSelector"])
    devices = _list(spec.get("devices"))
    counters = _list(spec.get("sharedCounters"))
    if devices and counters:
        causes.append(
            _invalid(
                "spec",
                "{`devices`, `sharedCounters`}",
                "only one of `devices` or `sharedCounters` may be set",
            )
        )
    if len(counters) > MAX_SHARED_COUNTERS:
        causes.append(_too_many("spec.sharedCounters", len(counters), MAX_SHARED_COUNTERS))
    heavy = any(_dict(d).get("taints") or _dict(d).get("consumesCounters") for d in devices)
    limit = MAX_DEVICES_WITH_TAINTS_OR_COUNTERS if heavy else MAX_DEVICES
    if len(devices) > limit:
        causes.append(_too_many("spec.devices", len(devices), limit))
        return causes
    seen: set[str] = set()
    for i, raw_device in enumerate(devices):
        device = _dict(raw_device)
        causes += _validate_device(f"spec.devices[{i}]", device, per_device is True)
        name = device.get("name")
        if name in seen:
            causes.append(_duplicate(f"spec.devices[{i}]", name))
        if isinstance(name, str):
            seen.add(name)
    return causes


def semantic(value: Any) -> Any:
    """What Go's semantic equality compares: a null or empty list is the same as an absent field."""
    if isinstance(value, dict):
        return {k: semantic(v) for k, v in value.items() if v is not None and v != []}
    if isinstance(value, list):
        return [semantic(v) for v in value]
    return value


def _immutable(field: str, new: Any, old: Any) -> list[JsonObj]:
    return [] if new == old else [_invalid(field, new if new is not None else "", "field is immutable")]


def validate_slice_update(old: JsonObj, new: JsonObj) -> list[JsonObj]:
    old_spec, new_spec = _dict(old.get("spec")), _dict(new.get("spec"))
    causes = _immutable("spec.nodeName", new_spec.get("nodeName"), old_spec.get("nodeName"))
    causes += _immutable("spec.driver", new_spec.get("driver"), old_spec.get("driver"))
    causes += _immutable(
        "spec.pool.name", _dict(new_spec.get("pool")).get("name"), _dict(old_spec.get("pool")).get("name")
    )
    return causes


# ---------------------------------------------------------------- ResourceClaim
def _default_request(request: JsonObj) -> None:
    request.setdefault("allocationMode", "ExactCount")
    if request["allocationMode"] == "ExactCount" and not request.get("count"):
        request["count"] = 1
    for toleration in _list(request.get("tolerations")):
        if isinstance(toleration, dict) and not toleration.get("operator"):
            toleration["operator"] = "Equal"
    capacity = _dict(request.get("capacity"))
    if isinstance(capacity.get("requests"), dict):
        capacity["requests"] = {
            k: quantity.canonical_quantity(v) for k, v in sorted(capacity["requests"].items())
        }


def default_claim_spec(spec: Any) -> None:
    for request in _list(_dict(_dict(spec).get("devices")).get("requests")):
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            _default_request(request["exactly"])
        for sub in _list(request.get("firstAvailable")):
            if isinstance(sub, dict):
                _default_request(sub)


def default_claim(obj: JsonObj) -> None:
    default_claim_spec(obj.get("spec"))
    if not isinstance(obj.get("status"), dict):
        obj["status"] = {}
    for result in _list(_dict(_dict(obj["status"].get("allocation")).get("devices")).get("results")):
        if isinstance(result, dict) and isinstance(result.get("consumedCapacity"), dict):
            result["consumedCapacity"] = {
                k: quantity.canonical_quantity(v) for k, v in sorted(result["consumedCapacity"].items())
            }


def default_claim_template(obj: JsonObj) -> None:
    default_claim_spec(_dict(obj.get("spec")).get("spec"))


def request_names(spec: Any) -> dict[str, set[str]]:
    """Request name -> its subrequest names."""
    names: dict[str, set[str]] = {}
    for raw_request in _list(_dict(_dict(spec).get("devices")).get("requests")):
        request = _dict(raw_request)
        if isinstance(request.get("name"), str):
            names[request["name"]] = {str(_dict(s).get("name")) for s in _list(request.get("firstAvailable"))}
    return names


def _validate_request_body(field: str, request: JsonObj) -> list[JsonObj]:
    causes = validate_class_name(f"{field}.deviceClassName", request.get("deviceClassName"))
    causes += validate_selectors(f"{field}.selectors", request.get("selectors"))
    mode, count = request.get("allocationMode") or "", request.get("count") or 0
    if mode == "All":
        if count:
            causes.append(
                _invalid(f"{field}.count", count, "must not be specified when allocationMode is 'All'")
            )
    elif mode == "ExactCount":
        if count <= 0:
            causes.append(_invalid(f"{field}.count", count, "must be greater than zero"))
    else:
        causes.append(_not_supported(f"{field}.allocationMode", mode, ALLOCATION_MODES))
    tolerations = _list(request.get("tolerations"))
    if len(tolerations) > MAX_TOLERATIONS:
        causes.append(_too_many(f"{field}.tolerations", len(tolerations), MAX_TOLERATIONS))
    for i, toleration in enumerate(tolerations):
        causes += _validate_toleration(f"{field}.tolerations[{i}]", _dict(toleration))
    for name in _dict(_dict(request.get("capacity")).get("requests")):
        causes += validate_qualified_name(f"{field}.capacity.requests", name)
    return causes


def _validate_toleration(field: str, toleration: JsonObj) -> list[JsonObj]:
    causes: list[JsonObj] = []
    key = toleration.get("key") or ""
    if key:
        causes += [dict(c, field=f"{field}.key") for c in validation.validate_label_key(key)]
    operator = toleration.get("operator") or "Equal"
    if operator not in TOLERATION_OPERATORS:
        causes.append(_not_supported(f"{field}.operator", operator, TOLERATION_OPERATORS))
    elif operator == "Exists" and toleration.get("value"):
        causes.append(
            _invalid(f"{field}.value", toleration["value"], "must be empty when `operator` is 'Exists'")
        )
    elif operator == "Equal" and not key:
        causes.append(_invalid(f"{field}.operator", operator, "must be 'Exists' when `key` is empty"))
    effect = toleration.get("effect") or ""
    if effect and effect not in TAINT_EFFECTS:
        causes.append(_not_supported(f"{field}.effect", effect, TAINT_EFFECTS))
    if toleration.get("tolerationSeconds") is not None and effect != "NoExecute":
        causes.append(
            _invalid(f"{field}.effect", effect, "must be 'NoExecute' when `tolerationSeconds` is set")
        )
    return causes


def _validate_named_set(field: str, items: list[Any], limit: int, check: Any) -> list[JsonObj]:
    if len(items) > limit:
        return [_too_many(field, len(items), limit)]
    causes: list[JsonObj] = []
    seen: set[str] = set()
    for i, raw_item in enumerate(items):
        item = _dict(raw_item)
        causes += check(f"{field}[{i}]", item)
        name = item.get("name")
        if name in seen:
            causes.append(_duplicate(f"{field}[{i}].name", name))
        if isinstance(name, str):
            seen.add(name)
    return causes


def _validate_request(field: str, request: JsonObj) -> list[JsonObj]:
    causes = validate_dns_label(f"{field}.name", request.get("name"))
    exactly, first = request.get("exactly"), _list(request.get("firstAvailable"))
    kinds = int(exactly is not None) + int(bool(first))
    if kinds == 0:
        causes.append(_required(field, "exactly one of `exactly` or `firstAvailable` is required"))
    elif kinds > 1:
        causes.append(
            _invalid(
                field,
                None,
                "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
            )
        )
    if exactly is not None:
        causes += _validate_request_body(f"{field}.exactly", _dict(exactly))

    def sub_check(path: str, sub: JsonObj) -> list[JsonObj]:
        return validate_dns_label(f"{path}.name", sub.get("name")) + _validate_request_body(path, sub)

    causes += _validate_named_set(f"{field}.firstAvailable", first, MAX_SUBREQUESTS, sub_check)
    return causes


def validate_claim_spec(field: str, spec: Any) -> list[JsonObj]:
    devices = _dict(_dict(spec).get("devices"))
    path = f"{field}.devices"
    causes = _validate_named_set(
        f"{path}.requests", _list(devices.get("requests")), MAX_REQUESTS, _validate_request
    )
    names = request_names(spec)
    constraints = _list(devices.get("constraints"))
    if len(constraints) > MAX_CONSTRAINTS:
        causes.append(_too_many(f"{path}.constraints", len(constraints), MAX_CONSTRAINTS))
    else:
        for i, raw_constraint in enumerate(constraints):
            constraint = _dict(raw_constraint)
            cpath = f"{path}.constraints[{i}]"
            causes += _validate_request_refs(f"{cpath}.requests", constraint.get("requests"), names)
            match, distinct = constraint.get("matchAttribute"), constraint.get("distinctAttribute")
            if match is None and distinct is None:
                causes.append(_required(f"{cpath}.matchAttribute"))
            elif match is not None and distinct is not None:
                causes.append(
                    _invalid(
                        cpath,
                        "{`matchAttribute`, `distinctAttribute`}",
                        "exactly one of `matchAttribute` or `distinctAttribute` is required, "
                        "but multiple fields are set",
                    )
                )
            for key, value in (("matchAttribute", match), ("distinctAttribute", distinct)):
                if value is not None:
                    causes += validate_fully_qualified_name(f"{cpath}.{key}", str(value))
    configs = _list(devices.get("config"))
    if len(configs) > MAX_CONFIGS:
        causes.append(_too_many(f"{path}.config", len(configs), MAX_CONFIGS))
    else:
        for i, raw_config in enumerate(configs):
            config = _dict(raw_config)
            causes += _validate_request_refs(f"{path}.config[{i}].requests", config.get("requests"), names)
            causes += _validate_opaque(f"{path}.config[{i}]", config)
    return causes


def validate_claim(obj: JsonObj) -> list[JsonObj]:
    """Create and update of the main resource (its status is not written there)."""
    return validate_claim_spec("spec", obj.get("spec"))


def validate_claim_template(obj: JsonObj) -> list[JsonObj]:
    spec = _dict(obj.get("spec"))
    meta = _dict(spec.get("metadata"))
    causes = validation.validate_labels(meta.get("labels"), "spec.metadata.labels")
    return causes + validate_claim_spec("spec.spec", spec.get("spec"))


def validate_claim_status(new: JsonObj, old: JsonObj | None) -> list[JsonObj]:
    status = _dict(new.get("status"))
    allocation = status.get("allocation")
    causes: list[JsonObj] = []
    reserved = _list(status.get("reservedFor"))
    if len(reserved) > MAX_RESERVED_FOR:
        causes.append(_too_many("status.reservedFor", len(reserved), MAX_RESERVED_FOR))
    seen: set[str] = set()
    for i, raw_consumer in enumerate(reserved):
        consumer = _dict(raw_consumer)
        for key in ("resource", "name", "uid"):
            if not consumer.get(key):
                causes.append(_required(f"status.reservedFor[{i}].{key}"))
        uid = consumer.get("uid")
        if uid and uid in seen:
            causes.append(_duplicate(f"status.reservedFor[{i}].uid", uid))
        if uid:
            seen.add(uid)
    if reserved and allocation is None:
        causes.append(_forbidden("status.reservedFor", "may not be specified when `allocated` is not set"))
    old_allocation = _dict(old.get("status")).get("allocation") if old is not None else None
    if old_allocation is not None and allocation is not None:
        if semantic(allocation) != semantic(old_allocation):
            causes.append(
                _invalid_raw(
                    "status.allocation", godump.go_dump(allocation, "AllocationResult"), "field is immutable"
                )
            )
    elif allocation is not None:
        causes += _validate_allocation(_dict(allocation), request_names(new.get("spec")))
    return causes


def _validate_allocation(allocation: JsonObj, names: dict[str, set[str]]) -> list[JsonObj]:
    field = "status.allocation"
    devices = _dict(allocation.get("devices"))
    results = _list(devices.get("results"))
    causes: list[JsonObj] = []
    if len(results) > MAX_RESULTS:
        causes.append(_too_many(f"{field}.devices.results", len(results), MAX_RESULTS))
    else:
        for i, raw_result in enumerate(results):
            result = _dict(raw_result)
            path = f"{field}.devices.results[{i}]"
            request = str(result.get("request") or "")
            main, slash, sub = request.partition("/")
            if not request:
                causes.append(_required(f"{path}.request"))
            elif main not in names or (slash and sub not in names[main]):
                causes.append(_invalid(f"{path}.request", request, REQUEST_REF_MSG))
            causes += validate_driver_name(f"{path}.driver", result.get("driver"))
            causes += validate_pool_name(f"{path}.pool", result.get("pool"))
            causes += validate_dns_label(f"{path}.device", result.get("device"))
    for i, raw_config in enumerate(_list(devices.get("config"))):
        config = _dict(raw_config)
        path = f"{field}.devices.config[{i}]"
        source = config.get("source") or ""
        if not source:
            causes.append(_required(f"{path}.source"))
        elif source not in CONFIG_SOURCES:
            causes.append(_not_supported(f"{path}.source", source, CONFIG_SOURCES))
        causes += _validate_request_refs(f"{path}.requests", config.get("requests"), names)
        causes += _validate_opaque(path, config)
    if allocation.get("nodeSelector") is not None:
        terms = _list(_dict(allocation["nodeSelector"]).get("nodeSelectorTerms"))
        if not terms:
            causes.append(
                _required(
                    f"{field}.nodeSelector.nodeSelectorTerms", "must have at least one node selector term"
                )
            )
    return causes


def validate_claim_update(old: JsonObj, new: JsonObj) -> list[JsonObj]:
    """A PUT of the main resource: the spec may not change."""
    if semantic(_dict(old.get("spec"))) == semantic(_dict(new.get("spec"))):
        return []
    return [_invalid_raw("spec", godump.go_dump(new.get("spec"), "ResourceClaimSpec"), "field is immutable")]


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
    meta = _dict(spec.get("metadata"))
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


def validate_claim_template_update(old: JsonObj, new: JsonObj) -> list[JsonObj]:
    if semantic(_dict(old.get("spec"))) == semantic(_dict(new.get("spec"))):
        return []
    return [_invalid_raw("spec", _template_spec_dump(_dict(new.get("spec"))), "field is immutable")]


def validate_update(kind: str, old: JsonObj, new: JsonObj, *, status: bool) -> list[JsonObj]:
    """The rules that compare a write with the stored object (PUT or PATCH, main or /status)."""
    if kind == "ResourceClaim":
        return validate_claim_status(new, old) if status else validate_claim_update(old, new)
    if kind == "ResourceClaimTemplate" and not status:
        return validate_claim_template_update(old, new)
    if kind == "ResourceSlice" and not status:
        return validate_slice_update(old, new)
    return []


def validate(kind: str, obj: JsonObj) -> list[JsonObj]:
    """Object validation of one resource.k8s.io kind (create and update)."""
    check = {
        "DeviceClass": validate_device_class,
        "ResourceSlice": validate_slice,
        "ResourceClaim": validate_claim,
        "ResourceClaimTemplate": validate_claim_template,
    }.get(kind)
    return check(obj) if check is not None else []


DEFAULTS = {
    "ResourceSlice": default_slice,
    "ResourceClaim": default_claim,
    "ResourceClaimTemplate": default_claim_template,
}
