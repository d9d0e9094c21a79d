"""ResourceSlice (resource.k8s.io/v1): what the server stores and what it refuses.

Defaulting: capacity, counter and request-policy quantities come back canonical; map keys sorted;
fields of features that are off by default in 1.36 (list-typed attributes, node-allocatable
resource mappings) are dropped on create.

Validation, in the server's order: driver; pool (name, resourceSliceCount > 0, generation >= 0);
on update pool name, driver and nodeName immutable; node selection (exactly one of nodeName,
nodeSelector with one term, allNodes, perDeviceNodeSelection; an empty or false value is
invalid, not unset); devices xor sharedCounters; at most 128 devices (64 when one has taints or
consumes counters), each checked (name, <= 32 attributes and capacities, attribute and capacity
names and values, taints, counter consumption, per-device node selection, binding conditions),
then duplicate device names; at most 8 counter sets with unique names.
"""

from __future__ import annotations

import re
from typing import Any

from gpuop_sim.apiserver import godump, quantity, validation
from gpuop_sim.apiserver.drarules import (
    Causes,
    JsonObj,
    as_dict,
    as_list,
    check_list,
    check_set,
    dns_label,
    driver_name,
    duplicate,
    forbidden,
    invalid,
    invalid_shown,
    key_path,
    label_name,
    label_value,
    node_selector,
    not_supported,
    pool_name,
    qualified_name,
    required,
    too_long,
    too_many,
)

MAX_DEVICES = 128
MAX_DEVICES_WITH_TAINTS_OR_COUNTERS = 64
MAX_ATTRIBUTES_AND_CAPACITIES = 32
MAX_ATTRIBUTE_VALUE = 64
MAX_TAINTS = 16
MAX_COUNTER_SETS = 8
MAX_CONSUMPTIONS_PER_DEVICE = 2
MAX_BINDING_CONDITIONS = 4
TAINT_EFFECTS = ("NoExecute", "NoSchedule", "None")
# Off by default in 1.36 (DRAListTypeAttributes, DRANodeAllocatableResources): dropped on create.
LIST_ATTRIBUTE_FIELDS = ("bools", "ints", "strings", "versions")
DISABLED_DEVICE_FIELDS = ("nodeAllocatableResourceMappings",)

_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(-(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(\.(0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*)?"
    r"(\+[0-9a-zA-Z-]+(\.[0-9a-zA-Z-]+)*)?"
)
_ONE_OF = "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"
_PER_DEVICE = (
    "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` "
    "is set to true in the ResourceSlice spec"
)
_NOT_PER_DEVICE = (
    "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is set to true "
    "in the ResourceSlice spec"
)


# ---------------------------------------------------------------- defaulting
def default_slice(obj: JsonObj, *, create: bool = True) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    for device in as_list(spec.get("devices")):
        if not isinstance(device, dict):
            continue
        if create:
            for key in DISABLED_DEVICE_FIELDS:
                device.pop(key, None)
        attributes = device.get("attributes")
        if isinstance(attributes, dict):
            if create:
                for value in attributes.values():
                    for key in LIST_ATTRIBUTE_FIELDS:
                        as_dict(value).pop(key, None)
            device["attributes"] = dict(sorted(attributes.items()))
        capacity = device.get("capacity")
        if isinstance(capacity, dict):
            for value in capacity.values():
                _canonical_capacity(value)
            device["capacity"] = dict(sorted(capacity.items()))
        for consumption in as_list(device.get("consumesCounters")):
            _canonical_counters(as_dict(consumption))
    for counter_set in as_list(spec.get("sharedCounters")):
        _canonical_counters(as_dict(counter_set))


def _canonical_capacity(capacity: Any) -> None:
    if not isinstance(capacity, dict):
        return
    if "value" in capacity:
        capacity["value"] = quantity.canonical_quantity(capacity["value"])
    policy = capacity.get("requestPolicy")
    if isinstance(policy, dict):
        if policy.get("default") is not None:
            policy["default"] = quantity.canonical_quantity(policy["default"])
        if isinstance(policy.get("validValues"), list):
            policy["validValues"] = [quantity.canonical_quantity(v) for v in policy["validValues"]]
        valid_range = policy.get("validRange")
        if isinstance(valid_range, dict):
            for key in ("min", "max", "step"):
                if valid_range.get(key) is not None:
                    valid_range[key] = quantity.canonical_quantity(valid_range[key])


def _canonical_counters(holder: JsonObj) -> None:
    counters = holder.get("counters")
    if isinstance(counters, dict):
        for counter in counters.values():
            if isinstance(counter, dict) and "value" in counter:
                counter["value"] = quantity.canonical_quantity(counter["value"])
        holder["counters"] = dict(sorted(counters.items()))


# ---------------------------------------------------------------- validation
def _node_selector(field: str, selector: Any) -> Causes:
    """The core NodeSelector rules, then the DRA one: exactly one term (merging selectors of
    devices from several slices stays simple)."""
    causes = node_selector(field, selector)
    terms = as_dict(selector).get("nodeSelectorTerms")
    if len(as_list(terms)) != 1:
        shown = godump.go_dump(as_dict(selector), "NodeSelector")[len('{"NodeSelectorTerms":') : -1]
        causes.append(
            invalid_shown(f"{field}.nodeSelectorTerms", shown, "must have exactly one node selector term")
        )
    return causes


def _immutable(field: str, new: Any, old: Any) -> Causes:
    return [] if new == old else [invalid(field, new if new is not None else "", "field is immutable")]


def validate_slice(obj: JsonObj, old: JsonObj | None = None) -> Causes:
    spec = as_dict(obj.get("spec"))
    causes = driver_name("spec.driver", spec.get("driver"))
    pool = as_dict(spec.get("pool"))
    causes += pool_name("spec.pool.name", pool.get("name"))
    count, generation = pool.get("resourceSliceCount") or 0, pool.get("generation") or 0
    if count <= 0:
        causes.append(invalid("spec.pool.resourceSliceCount", count, "must be greater than zero"))
    if generation < 0:
        causes.append(invalid("spec.pool.generation", generation, "must be greater than or equal to zero"))
    if old is not None:
        old_spec = as_dict(old.get("spec"))
        causes += _immutable("spec.pool.name", pool.get("name"), as_dict(old_spec.get("pool")).get("name"))
        causes += _immutable("spec.driver", spec.get("driver"), old_spec.get("driver"))
        causes += _immutable("spec.nodeName", spec.get("nodeName"), old_spec.get("nodeName"))
    causes += _node_selection(spec)
    if spec.get("sharedCounters") is not None and spec.get("devices") is not None:
        causes.append(invalid("spec", "", "only one of `sharedCounters` or `devices` is allowed"))
    devices = as_list(spec.get("devices"))
    heavy = any(as_dict(d).get("taints") or as_dict(d).get("consumesCounters") for d in devices)
    per_device = spec.get("perDeviceNodeSelection") is True
    causes += check_set(
        "spec.devices",
        devices,
        MAX_DEVICES_WITH_TAINTS_OR_COUNTERS if heavy else MAX_DEVICES,
        lambda path, device: _device(path, as_dict(device), per_device),
        lambda device: as_dict(device).get("name"),
    )
    causes += check_set(
        "spec.sharedCounters",
        as_list(spec.get("sharedCounters")),
        MAX_COUNTER_SETS,
        _counter_set,
        lambda counter_set: as_dict(counter_set).get("name"),
    )
    return causes


def _node_selection(spec: JsonObj) -> Causes:
    causes: Causes = []
    chosen: list[str] = []
    node_name = spec.get("nodeName")
    if node_name is not None:
        if node_name:
            chosen.append("`nodeName`")
            causes += validation.validate_name(node_name, "Node", "spec.nodeName")
        else:
            causes.append(
                invalid("spec.nodeName", node_name, "must be either unset or set to a non-empty string")
            )
    if spec.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        causes += _node_selector("spec.nodeSelector", spec["nodeSelector"])
    for key in ("allNodes", "perDeviceNodeSelection"):
        if spec.get(key) is True:
            chosen.append(f"`{key}`")
        elif spec.get(key) is not None:
            causes.append(invalid(f"spec.{key}", spec[key], "must be either unset or set to true"))
    if not chosen:
        causes.append(required("spec", _ONE_OF))
    elif len(chosen) > 1:
        causes.append(
            invalid("spec", "{" + ", ".join(chosen) + "}", f"{_ONE_OF}, but multiple fields are set")
        )
    return causes


def _device(field: str, device: JsonObj, per_device: bool) -> Causes:
    causes = dns_label(f"{field}.name", device.get("name"))
    attributes, capacity = as_dict(device.get("attributes")), as_dict(device.get("capacity"))
    combined = len(attributes) + len(capacity)
    if combined > MAX_ATTRIBUTES_AND_CAPACITIES:
        causes.append(
            invalid(
                field,
                combined,
                "the total number of attributes and capacities must not exceed "
                f"{MAX_ATTRIBUTES_AND_CAPACITIES}",
            )
        )
    for name, attribute in attributes.items():
        causes += qualified_name(f"{field}.attributes", name)
        causes += _attribute(key_path(f"{field}.attributes", name), as_dict(attribute))
    multiple = device.get("allowMultipleAllocations") is True
    for name, value in capacity.items():
        causes += qualified_name(f"{field}.capacity", name)
        causes += _capacity(key_path(f"{field}.capacity", name), as_dict(value), multiple)
    causes += check_list(f"{field}.taints", as_list(device.get("taints")), MAX_TAINTS, _taint)
    causes += check_set(
        f"{field}.consumesCounters",
        as_list(device.get("consumesCounters")),
        MAX_CONSUMPTIONS_PER_DEVICE,
        _counter_consumption,
        lambda consumption: as_dict(consumption).get("counterSet"),
    )
    causes += _device_node_selection(field, device, per_device)
    causes += _binding_conditions(field, device)
    return causes


def _attribute(field: str, attribute: JsonObj) -> Causes:
    causes: Causes = []
    present = 0
    for key in ("bool", "int", "string", "version"):
        value = attribute.get(key)
        if value is None:
            continue
        present += 1
        if key in ("string", "version") and isinstance(value, str):
            if key == "version" and not _SEMVER.fullmatch(value):
                causes.append(
                    invalid(
                        f"{field}.version", value, "must be a string compatible with semver.org spec 2.0.0"
                    )
                )
            if len(value) > MAX_ATTRIBUTE_VALUE:
                causes.append(too_long(f"{field}.{key}", MAX_ATTRIBUTE_VALUE))
    if present == 0:
        causes.append(invalid(field, "", "exactly one value must be specified"))
    elif present > 1:
        shown = godump.go_dump(attribute, "DeviceAttribute")
        causes.append(invalid_shown(field, shown, "exactly one value must be specified"))
    return causes


def _capacity(field: str, capacity: JsonObj, multiple: bool) -> Causes:
    policy = capacity.get("requestPolicy")
    if policy is None:
        return []
    path = f"{field}.requestPolicy"
    if not multiple:
        return [forbidden(path, "allowMultipleAllocations must be true")]
    policy = as_dict(policy)
    valid_values, valid_range = as_list(policy.get("validValues")), policy.get("validRange")
    if valid_values and valid_range is not None:
        return [
            forbidden(
                path,
                'exactly one policy can be specified, cannot specify "validValues" and "validRange" '
                "at the same time",
            )
        ]
    if (valid_values or valid_range is not None) and policy.get("default") is None:
        which = "validValues" if valid_values else "validRange"
        return [required(f"{path}.default", f"required when {which} is defined")]
    maximum = quantity.parse_quantity(capacity.get("value", "0"))[0]
    default = quantity.parse_quantity(policy["default"])[0] if policy.get("default") is not None else None
    causes: Causes = []
    if valid_values and default is not None:
        parsed = [quantity.parse_quantity(v)[0] for v in valid_values]
        for i in range(1, len(parsed)):
            if parsed[i - 1] > parsed[i]:
                causes.append(
                    invalid(
                        f"{path}.validValues[{i}]",
                        valid_values[i],
                        "values must be sorted in ascending order",
                    )
                )
        for i, option in enumerate(parsed):
            if option > maximum:
                causes.append(
                    invalid(
                        f"{path}.validValues[{i}]",
                        valid_values[i],
                        f"option is larger than capacity value: {capacity.get('value')}",
                    )
                )
        if default not in parsed:
            causes.append(
                invalid(
                    f"{path}.validValues",
                    policy["default"],
                    "default value is not valid according to the requestPolicy",
                )
            )
    elif isinstance(valid_range, dict) and default is not None:
        if valid_range.get("min") is None:
            return [required(f"{path}.validRange.min", "required when validRange is defined")]
        low = quantity.parse_quantity(valid_range["min"])[0]
        if low > maximum:
            causes.append(
                invalid(
                    f"{path}.validRange.min",
                    valid_range["min"],
                    f"min is larger than capacity value: {capacity.get('value')}",
                )
            )
        if default < low:
            causes.append(
                invalid(
                    f"{path}.validRange.min",
                    policy["default"],
                    f"default is less than min: {valid_range['min']}",
                )
            )
        if valid_range.get("max") is not None:
            high = quantity.parse_quantity(valid_range["max"])[0]
            if low > high:
                causes.append(
                    invalid(
                        f"{path}.validRange.max",
                        valid_range["min"],
                        f"min is larger than max: {valid_range['max']}",
                    )
                )
            if high > maximum:
                causes.append(
                    invalid(
                        f"{path}.validRange.max",
                        valid_range["max"],
                        f"max is larger than capacity value: {capacity.get('value')}",
                    )
                )
            if default > high:
                causes.append(
                    invalid(
                        f"{path}.validRange.max",
                        policy["default"],
                        f"default is more than max: {valid_range['max']}",
                    )
                )
    return causes


def _taint(field: str, taint: Any) -> Causes:
    taint = as_dict(taint)
    causes = label_name(f"{field}.key", taint.get("key") or "")
    if taint.get("value"):
        causes += label_value(f"{field}.value", taint["value"])
    effect = taint.get("effect") or ""
    if not effect:
        causes.append(required(f"{field}.effect"))
    elif effect not in TAINT_EFFECTS:
        causes.append(not_supported(f"{field}.effect", effect, TAINT_EFFECTS))
    return causes


def _counters(field: str, counters: Any, limit: int) -> Causes:
    counters = as_dict(counters)
    if not counters:
        return [required(field)]
    if len(counters) > limit:
        return [too_many(field, len(counters), limit)]
    causes: Causes = []
    for name in counters:
        causes += dns_label(key_path(field, name), name)
    return causes


def _counter_set(field: str, counter_set: Any) -> Causes:
    counter_set = as_dict(counter_set)
    name = counter_set.get("name") or ""
    causes = dns_label(f"{field}.name", name) if name else [required(f"{field}.name")]
    return causes + _counters(f"{field}.counters", counter_set.get("counters"), 32)


def _counter_consumption(field: str, consumption: Any) -> Causes:
    consumption = as_dict(consumption)
    name = consumption.get("counterSet") or ""
    causes = dns_label(f"{field}.counterSet", name) if name else [required(f"{field}.counterSet")]
    return causes + _counters(f"{field}.counters", consumption.get("counters"), 32)


def _device_node_selection(field: str, device: JsonObj, per_device: bool) -> Causes:
    if not per_device:
        if any(device.get(key) is not None for key in ("nodeName", "nodeSelector", "allNodes")):
            return [invalid(field, None, _NOT_PER_DEVICE)]
        return []
    causes: Causes = []
    chosen: list[str] = []
    node_name = device.get("nodeName")
    if node_name is not None:
        if node_name:
            chosen.append("`nodeName`")
            causes += validation.validate_name(node_name, "Node", f"{field}.nodeName")
        else:
            causes.append(invalid(f"{field}.nodeName", node_name, "must not be empty"))
    if device.get("nodeSelector") is not None:
        chosen.append("`nodeSelector`")
        causes += node_selector(f"{field}.nodeSelector", device["nodeSelector"])
    if device.get("allNodes") is True:
        chosen.append("`allNodes`")
    elif device.get("allNodes") is not None:
        causes.append(invalid(f"{field}.allNodes", device["allNodes"], "must be either unset or set to true"))
    if not chosen:
        causes.append(required(field, _PER_DEVICE))
    elif len(chosen) > 1:
        causes.append(invalid(field, "{" + ", ".join(chosen) + "}", _PER_DEVICE))
    return causes


def _binding_conditions(field: str, holder: JsonObj) -> Causes:
    conditions = [str(c) for c in as_list(holder.get("bindingConditions"))]
    failures = [str(c) for c in as_list(holder.get("bindingFailureConditions"))]
    causes = check_list(f"{field}.bindingConditions", conditions, MAX_BINDING_CONDITIONS, label_name)
    causes += check_list(f"{field}.bindingFailureConditions", failures, MAX_BINDING_CONDITIONS, label_name)
    for key, items in (("bindingConditions", conditions), ("bindingFailureConditions", failures)):
        seen: set[str] = set()
        for i, condition in enumerate(items):
            if condition in seen:
                causes.append(duplicate(f"{field}.{key}[{i}]", condition))
            seen.add(condition)
            if key == "bindingFailureConditions" and condition in conditions:
                causes.append(
                    invalid(
                        f"{field}.{key}[{i}]",
                        condition,
                        "bindingFailureConditions must not overlap with bindingConditions",
                    )
                )
    if failures and not conditions:
        causes.append(
            invalid_shown(
                f"{field}.bindingConditions",
                "null",
                "bindingConditions are required to use bindingFailureConditions",
            )
        )
    if conditions and not failures:
        causes.append(
            invalid_shown(
                f"{field}.bindingFailureConditions",
                "null",
                "bindingFailureConditions are required to use bindingConditions",
            )
        )
    return causes
