"""managedFields tracking (FieldsV1): which manager set which field.

Field sets are sets of paths; a path is a tuple of FieldsV1 keys ("f:data", "k:{...}", "v:...",
or a trailing "." meaning "this map/item itself"). Non-apply writes are recorded as Update
entries of the request's field manager; ssa.py builds Apply entries on top of these helpers.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from gpuop_sim.apiserver import patches
from gpuop_sim.apiserver.resources import ResourceType

JsonObj = dict[str, Any]
Path = tuple[str, ...]
IGNORED_META = frozenset(
    {
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
        "generateName",
    }
)


# ---------------------------------------------------------------- list semantics
def list_kind(rt: ResourceType, field: str, schema: JsonObj | None) -> tuple[str, list[str]]:
    """('map', keys) | ('set', []) | ('atomic', []) for the list at `field`."""
    if schema is not None:
        kind = schema.get("x-kubernetes-list-type")
        if kind == "map":
            return "map", list(schema.get("x-kubernetes-list-map-keys") or [])
        if kind == "set":
            return "set", []
        return "atomic", []
    if field in patches.MERGE_SCALAR_LISTS:
        return "set", []
    key = patches.KIND_MERGE_KEYS.get(rt.kind, {}).get(field) or patches.MERGE_KEYS.get(field)
    return ("map", [key]) if key else ("atomic", [])


def child_schema(schema: JsonObj | None, name: str) -> JsonObj | None:
    if schema is None:
        return None
    props = schema.get("properties") or {}
    if name in props:
        return dict(props[name])
    extra = schema.get("additionalProperties")
    return dict(extra) if isinstance(extra, dict) else {}


def item_key(item: Any, keys: list[str]) -> str:
    return "k:" + json.dumps(
        {k: item.get(k) for k in keys if isinstance(item, dict)}, separators=(",", ":"), sort_keys=True
    )


def walk(
    rt: ResourceType, value: Any, schema: JsonObj | None, prefix: Path, out: set[Path], *, field: str
) -> None:
    if isinstance(value, dict):
        if not value:
            out.add(prefix)
            return
        for name, child in value.items():
            walk(rt, child, child_schema(schema, name), (*prefix, "f:" + name), out, field=name)
    elif isinstance(value, list):
        kind, keys = list_kind(rt, field, schema)
        item_schema = (schema or {}).get("items") if schema is not None else None
        if kind == "map" and all(isinstance(i, dict) for i in value):
            for item in value:
                item_path = (*prefix, item_key(item, keys))
                out.add((*item_path, "."))
                for name, child in item.items():
                    walk(
                        rt, child, child_schema(item_schema, name), (*item_path, "f:" + name), out, field=name
                    )
        elif kind == "set":
            for item in value:
                out.add((*prefix, "v:" + json.dumps(item, separators=(",", ":"))))
        else:
            out.add(prefix)
    else:
        out.add(prefix)


def field_set(rt: ResourceType, obj: JsonObj, *, subresource: str = "") -> set[Path]:
    """Paths an object's content sets (metadata identity, apiVersion/kind and the other half of
    a status split excluded)."""
    schema = rt.custom.schema if rt.custom else None
    out: set[Path] = set()
    for name, child in obj.items():
        if name in ("apiVersion", "kind"):
            continue
        if rt.has_status() and (name == "status") != (subresource == "status"):
            continue
        if name == "metadata" and isinstance(child, dict):
            for mname, mval in child.items():
                if mname not in IGNORED_META:
                    walk(rt, mval, None, ("f:metadata", "f:" + mname), out, field=mname)
            continue
        walk(rt, child, child_schema(schema, name), ("f:" + name,), out, field=name)
    return out


def with_parents(paths: set[Path], new_maps: set[Path]) -> set[Path]:
    return paths | {(*m, ".") for m in new_maps}


def maps(obj: Any, prefix: Path = ()) -> set[Path]:
    """Paths of every non-empty map in `obj` (for the "." ownership markers of Update sets)."""
    out: set[Path] = set()
    if isinstance(obj, dict):
        for name, child in obj.items():
            if isinstance(child, dict) and child:
                path = (*prefix, "f:" + name)
                out.add(path)
                out |= maps(child, path)
    return out


# ---------------------------------------------------------------- FieldsV1 encoding
def to_fields_v1(paths: set[Path]) -> JsonObj:
    root: JsonObj = {}
    for path in sorted(paths):
        node = root
        for part in path:
            node = node.setdefault(part, {})
    return root


def from_fields_v1(tree: JsonObj, prefix: Path = ()) -> set[Path]:
    out: set[Path] = set()
    for key, child in tree.items():
        path = (*prefix, key)
        if key == "." or not child:
            out.add(path)
        else:
            out |= from_fields_v1(child, path)
    return out


def entries(obj: JsonObj) -> list[JsonObj]:
    return list((obj.get("metadata") or {}).get("managedFields") or [])


def set_entry(
    existing: list[JsonObj], rt: ResourceType, manager: str, op: str, *, sub: str, paths: set[Path]
) -> list[JsonObj]:
    out = [
        e
        for e in existing
        if not (e.get("manager") == manager and e.get("operation") == op and e.get("subresource", "") == sub)
    ]
    if paths:
        entry: JsonObj = {
            "manager": manager,
            "operation": op,
            "apiVersion": rt.api_version,
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(paths),
        }
        if sub:
            entry["subresource"] = sub
        position = next(
            (
                i
                for i, e in enumerate(existing)
                if e.get("manager") == manager
                and e.get("operation") == op
                and e.get("subresource", "") == sub
            ),
            None,
        )
        if position is None or position >= len(out):
            out.append(entry)
        else:
            out.insert(position, entry)
    return out


def strip_others(
    existing: list[JsonObj], keep: tuple[str, str, str], taken: set[Path], present: set[Path]
) -> list[JsonObj]:
    out: list[JsonObj] = []
    for e in existing:
        ident = (e.get("manager", ""), e.get("operation", ""), e.get("subresource", ""))
        if ident == keep:
            out.append(e)
            continue
        owned = from_fields_v1(e.get("fieldsV1") or {})
        remaining = {p for p in owned if p not in taken and (p in present or p[-1] == ".")}
        if remaining:
            out.append({**e, "fieldsV1": to_fields_v1(remaining)})
    return out


# ---------------------------------------------------------------- Update tracking
def track_update(rt: ResourceType, old: JsonObj | None, new: JsonObj, manager: str, subresource: str) -> None:
    """Record in new.metadata.managedFields what `manager` changed with a non-apply write."""
    if not manager:
        return
    before = field_set(rt, old, subresource=subresource) if old is not None else set()
    after = field_set(rt, new, subresource=subresource)
    changed = {p for p in after if p not in before or value_at(new, p) != value_at(old, p)}
    old_maps = maps(old) if old is not None else set()
    new_maps = {m for m in maps(new) if m not in old_maps and m and tracked_map(rt, m, subresource)}
    changed = with_parents(changed, new_maps)
    current = entries(old) if old is not None else []
    ident = (manager, "Update", subresource)
    mine = next(
        (
            from_fields_v1(e.get("fieldsV1") or {})
            for e in current
            if (e.get("manager"), e.get("operation"), e.get("subresource", "")) == ident
        ),
        set(),
    )
    mine = {p for p in mine if p in after or p[-1] == "."} | changed
    current = strip_others(current, ident, {p for p in changed if p[-1] != "."}, after)
    current = set_entry(current, rt, manager, "Update", sub=subresource, paths=mine)
    if current:
        new.setdefault("metadata", {})["managedFields"] = current
    else:
        new.get("metadata", {}).pop("managedFields", None)


def tracked_map(rt: ResourceType, path: Path, subresource: str) -> bool:
    top = path[0]
    if top in ("f:apiVersion", "f:kind"):
        return False
    if top == "f:metadata":
        return len(path) > 1 and path[1][2:] not in IGNORED_META
    if rt.has_status():
        return (top == "f:status") == (subresource == "status")
    return True


def value_at(obj: Any, path: Path) -> Any:
    cur = obj
    for part in path:
        if part == ".":
            return cur is not None
        if cur is None:
            return None
        if part.startswith("f:"):
            cur = cur.get(part[2:]) if isinstance(cur, dict) else None
        elif part.startswith("k:"):
            want = json.loads(part[2:])
            cur = (
                next(
                    (
                        i
                        for i in cur or []
                        if isinstance(i, dict) and all(i.get(k) == v for k, v in want.items())
                    ),
                    None,
                )
                if isinstance(cur, list)
                else None
            )
        elif part.startswith("v:"):
            val = json.loads(part[2:])
            return val if isinstance(cur, list) and val in cur else None
    return cur


def render(path: Path) -> str:
    out = ""
    for part in path:
        if part.startswith("f:"):
            out += "." + part[2:]
        elif part.startswith("k:"):
            keys = json.loads(part[2:])
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in keys.items()) + "]"
        elif part.startswith("v:"):
            out += f"[={part[2:]}]"
    return out
