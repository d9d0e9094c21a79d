"""Go-style dumps of internal API structs, as the real server prints them inside `Invalid value:`.

`field.Invalid(path, value, msg)` renders a struct value with `json.Marshal` of the internal Go
type, which has no json tags: field names are the Go names, every field appears (nil pointers
and slices as `null`), and embedded structs are flattened. Each table below lists one internal
type's fields in declaration order as (json name, Go name, type); a type is the name of another
table, `*Name` for a pointer to one, `[]Name` for a slice of them, or a scalar marker.
"""

from __future__ import annotations

import json
from typing import Any

JsonObj = dict[str, Any]

# scalar markers: "str" (zero ""), "int" (zero 0), "*scalar" (zero null), "[]scalar" (zero null),
# "map" (zero null), "raw" (RawExtension: the raw JSON or null), "inline:Name" (embedded struct).
STRUCTS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "AllocationResult": (
        ("devices", "Devices", "DeviceAllocationResult"),
        ("nodeSelector", "NodeSelector", "*NodeSelector"),
        ("allocationTimestamp", "AllocationTimestamp", "*scalar"),
    ),
    "DeviceAllocationResult": (
        ("results", "Results", "[]DeviceRequestAllocationResult"),
        ("config", "Config", "[]DeviceAllocationConfiguration"),
    ),
    "DeviceRequestAllocationResult": (
        ("request", "Request", "str"),
        ("driver", "Driver", "str"),
        ("pool", "Pool", "str"),
        ("device", "Device", "str"),
        ("adminAccess", "AdminAccess", "*scalar"),
        ("tolerations", "Tolerations", "[]DeviceToleration"),
        ("bindingConditions", "BindingConditions", "[]scalar"),
        ("bindingFailureConditions", "BindingFailureConditions", "[]scalar"),
        ("shareID", "ShareID", "*scalar"),
        ("consumedCapacity", "ConsumedCapacity", "map"),
    ),
    "DeviceAllocationConfiguration": (
        ("source", "Source", "str"),
        ("requests", "Requests", "[]scalar"),
        ("", "", "inline:DeviceConfiguration"),
    ),
    "DeviceConfiguration": (("opaque", "Opaque", "*OpaqueDeviceConfiguration"),),
    "OpaqueDeviceConfiguration": (("driver", "Driver", "str"), ("parameters", "Parameters", "raw")),
    "NodeSelector": (("nodeSelectorTerms", "NodeSelectorTerms", "[]NodeSelectorTerm"),),
    "NodeSelectorTerm": (
        ("matchExpressions", "MatchExpressions", "[]NodeSelectorRequirement"),
        ("matchFields", "MatchFields", "[]NodeSelectorRequirement"),
    ),
    "NodeSelectorRequirement": (
        ("key", "Key", "str"),
        ("operator", "Operator", "str"),
        ("values", "Values", "[]scalar"),
    ),
    "DeviceToleration": (
        ("key", "Key", "str"),
        ("operator", "Operator", "str"),
        ("value", "Value", "str"),
        ("effect", "Effect", "str"),
        ("tolerationSeconds", "TolerationSeconds", "*scalar"),
    ),
    "ResourceClaimSpec": (("devices", "Devices", "DeviceClaim"),),
    "DeviceClaim": (
        ("requests", "Requests", "[]DeviceRequest"),
        ("constraints", "Constraints", "[]DeviceConstraint"),
        ("config", "Config", "[]DeviceClaimConfiguration"),
    ),
    "DeviceRequest": (
        ("name", "Name", "str"),
        ("exactly", "Exactly", "*ExactDeviceRequest"),
        ("firstAvailable", "FirstAvailable", "[]DeviceSubRequest"),
    ),
    "ExactDeviceRequest": (
        ("deviceClassName", "DeviceClassName", "str"),
        ("selectors", "Selectors", "[]DeviceSelector"),
        ("allocationMode", "AllocationMode", "str"),
        ("count", "Count", "int"),
        ("adminAccess", "AdminAccess", "*scalar"),
        ("tolerations", "Tolerations", "[]DeviceToleration"),
        ("capacity", "Capacity", "*CapacityRequirements"),
    ),
    "DeviceSubRequest": (
        ("name", "Name", "str"),
        ("deviceClassName", "DeviceClassName", "str"),
        ("selectors", "Selectors", "[]DeviceSelector"),
        ("allocationMode", "AllocationMode", "str"),
        ("count", "Count", "int"),
        ("tolerations", "Tolerations", "[]DeviceToleration"),
        ("capacity", "Capacity", "*CapacityRequirements"),
    ),
    "CapacityRequirements": (("requests", "Requests", "map"),),
    "DeviceSelector": (("cel", "CEL", "*CELDeviceSelector"),),
    "CELDeviceSelector": (("expression", "Expression", "str"),),
    "DeviceConstraint": (
        ("requests", "Requests", "[]scalar"),
        ("matchAttribute", "MatchAttribute", "*scalar"),
        ("distinctAttribute", "DistinctAttribute", "*scalar"),
    ),
    "DeviceClaimConfiguration": (
        ("requests", "Requests", "[]scalar"),
        ("", "", "inline:DeviceConfiguration"),
    ),
    "DeviceAttribute": (
        ("int", "IntValue", "*scalar"),
        ("bool", "BoolValue", "*scalar"),
        ("string", "StringValue", "*scalar"),
        ("version", "VersionValue", "*scalar"),
        # 1.36 adds the list-typed values (behind DRAListTypeAttributes, off by default).
        ("ints", "IntValues", "[]scalar"),
        ("bools", "BoolValues", "[]scalar"),
        ("strings", "StringValues", "[]scalar"),
        ("versions", "VersionValues", "[]scalar"),
    ),
}


def _value(value: Any, typ: str) -> Any:
    if typ == "str":
        return value if value is not None else ""
    if typ == "int":
        return value if value is not None else 0
    if typ == "map":
        return dict(sorted(value.items())) if isinstance(value, dict) else value
    if typ in ("*scalar", "[]scalar"):
        return value
    if typ == "raw":
        return value
    if typ.startswith("[]"):
        return None if value is None else [_struct(v, typ[2:]) for v in value]
    if typ.startswith("*"):
        return None if value is None else _struct(value, typ[1:])
    return _struct(value or {}, typ)


def _struct(obj: Any, name: str) -> JsonObj:
    out: JsonObj = {}
    source = obj if isinstance(obj, dict) else {}
    for json_name, go_name, typ in STRUCTS[name]:
        if typ.startswith("inline:"):
            out.update(_struct(source, typ.split(":", 1)[1]))
        else:
            out[go_name] = _value(source.get(json_name), typ)
    return out


def go_dump(value: Any, name: str) -> str:
    """`json.Marshal` of the internal Go type `name` holding this (versioned JSON) value."""
    text = json.dumps(_struct(value, name), separators=(",", ":"), ensure_ascii=False)
    # Go's encoder escapes HTML-significant characters.
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
