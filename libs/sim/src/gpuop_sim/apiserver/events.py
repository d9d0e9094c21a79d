"""core/v1 and events.k8s.io/v1 Events are one stored object seen through two APIs.

The real server converts between the versions on read; the simulator keeps both views in step by
mirroring every write (same resourceVersion) through these pure conversions.
"""

from __future__ import annotations

from typing import Any

JsonObj = dict[str, Any]

# (core field, events.k8s.io field)
_RENAMES = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
)
_SHARED = ("metadata", "eventTime", "series", "action", "reason", "related", "type", "reportingInstance")


def core_to_v1(obj: JsonObj) -> JsonObj:
    out: JsonObj = {"kind": "Event", "apiVersion": "events.k8s.io/v1"}
    for key in _SHARED:
        if key in obj:
            out[key] = obj[key]
    for core_key, v1_key in _RENAMES:
        value = obj.get(core_key)
        if core_key == "source":
            out[v1_key] = value or {}
        elif core_key in ("firstTimestamp", "lastTimestamp") or value not in (None, "", 0):
            out[v1_key] = value
    return out


def v1_to_core(obj: JsonObj) -> JsonObj:
    out: JsonObj = {"kind": "Event", "apiVersion": "v1"}
    for core_key, v1_key in _RENAMES:
        value = obj.get(v1_key)
        if core_key in ("involvedObject", "source"):
            out[core_key] = value or {}
        elif core_key in ("firstTimestamp", "lastTimestamp") or value not in (None, ""):
            out[core_key] = value
    for key in _SHARED:
        if key in obj:
            out[key] = obj[key]
    out.setdefault("reportingComponent", "")
    out.setdefault("reportingInstance", "")
    return out
