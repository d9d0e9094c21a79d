"""Server-side apply (PATCH application/apply-patch+yaml), to the depth the transcripts pin.

Apply merges the configuration into the live object (maps recursively, list-maps by key, sets by
value), reports conflicts with other managers' differing values unless forced, and removes fields
the applier dropped from its configuration when no other manager owns them.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from gpuop_sim.apiserver import checks, crd, errors, managed
from gpuop_sim.apiserver.core import ApiCore, Result, WriteOptions
from gpuop_sim.apiserver.errors import ApiError
from gpuop_sim.apiserver.managed import IGNORED_META, Path, field_set, from_fields_v1
from gpuop_sim.apiserver.resources import ResourceType

JsonObj = dict[str, Any]


def _merge(rt: ResourceType, live: Any, config: Any, schema: JsonObj | None, field: str) -> Any:
    if isinstance(config, dict) and isinstance(live, dict):
        out = dict(live)
        for name, value in config.items():
            out[name] = _merge(rt, live.get(name), value, managed.child_schema(schema, name), name)
        return out
    if isinstance(config, list) and isinstance(live, list):
        kind, keys = managed.list_kind(rt, field, schema)
        item_schema = (schema or {}).get("items") if schema is not None else None
        if kind == "map":
            merged = list(live)
            for item in config:
                idx = next(
                    (
                        i
                        for i, cur in enumerate(merged)
                        if isinstance(cur, dict)
                        and isinstance(item, dict)
                        and all(cur.get(k) == item.get(k) for k in keys)
                    ),
                    None,
                )
                if idx is None:
                    merged.append(copy.deepcopy(item))
                else:
                    merged[idx] = _merge(rt, merged[idx], item, item_schema, "")
            return merged
        if kind == "set":
            return list(live) + [v for v in config if v not in live]
    return copy.deepcopy(config)


def _remove_path(obj: Any, path: Path) -> None:
    parent = managed.value_at(obj, path[:-1]) if len(path) > 1 else obj
    last = path[-1]
    if last == ".":
        _remove_path(obj, path[:-1])
    elif last.startswith("f:") and isinstance(parent, dict):
        parent.pop(last[2:], None)
    elif last.startswith("k:") and isinstance(parent, list):
        want = json.loads(last[2:])
        parent[:] = [
            i for i in parent if not (isinstance(i, dict) and all(i.get(k) == v for k, v in want.items()))
        ]
    elif last.startswith("v:") and isinstance(parent, list):
        val = json.loads(last[2:])
        parent[:] = [i for i in parent if i != val]


@checks.decode_guard
def apply(
    core: ApiCore,
    rt: ResourceType,
    ns: str,
    name: str,
    body: Any,
    *,
    opts: WriteOptions,
    force: bool,
    subresource: str,
) -> Result:
    if not isinstance(body, dict):
        raise errors.bad_request("apply configuration must be an object")
    config = copy.deepcopy(body)
    meta = config.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise errors.bad_request("metadata must be an object")
    if meta.get("name") and meta["name"] != name:
        raise errors.bad_request(
            f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
        )
    meta["name"] = name
    if rt.custom is not None:
        probe = copy.deepcopy(config)
        unknown = crd.prune(probe, rt.custom.schema)
        if unknown:
            raise ApiError(
                500,
                "",
                "failed to create typed patch object "
                f"({ns + '/' if ns else ''}{name}; {rt.api_version}, Kind={rt.kind}): "
                f".{unknown[0]}: field not declared in schema",
            )
    manager = opts.field_manager
    applied = field_set(rt, config, subresource=subresource)
    current = core.store.get(rt.key, ns, name)
    if current is None:
        if subresource:
            raise errors.not_found(rt, name)
        opts.field_manager = ""  # the Apply entry below replaces the Update one
        return core.create(rt, ns, config, opts, managed_entry=(manager, "Apply", applied))
    live = current.obj
    entries = managed.entries(live)
    ident = (manager, "Apply", subresource)
    conflicts: dict[str, list[Path]] = {}
    for e in entries:
        other = (e.get("manager", ""), e.get("operation", ""), e.get("subresource", ""))
        if other[0] == manager:
            continue
        owned = from_fields_v1(e.get("fieldsV1") or {})
        # An Update manager is named with the API version it wrote through, as the real server does.
        who = f'"{other[0]}"' + (
            f" using {e.get('apiVersion', rt.api_version)}" if other[1] == "Update" else ""
        )
        for p in sorted(applied & owned):
            if p[-1] != "." and managed.value_at(live, p) != managed.value_at(config, p):
                conflicts.setdefault(who, []).append(p)
    if conflicts and not force:
        raise _conflict_error(conflicts)
    previous = next(
        (
            from_fields_v1(e.get("fieldsV1") or {})
            for e in entries
            if (e.get("manager"), e.get("operation"), e.get("subresource", "")) == ident
        ),
        set(),
    )
    schema = rt.custom.schema if rt.custom else None
    merged = _merge(rt, copy.deepcopy(live), {k: v for k, v in config.items() if k != "metadata"}, schema, "")
    merged["metadata"] = _merge(
        rt,
        merged.get("metadata", {}),
        {k: v for k, v in meta.items() if k not in IGNORED_META},
        None,
        "metadata",
    )
    others_owned: set[Path] = set()
    for e in entries:
        if (e.get("manager", ""), e.get("operation", ""), e.get("subresource", "")) != ident:
            others_owned |= from_fields_v1(e.get("fieldsV1") or {})
    forced = {p for paths in conflicts.values() for p in paths}
    for p in sorted(previous - applied, key=len, reverse=True):
        if p not in others_owned or p in forced:
            _remove_path(merged, p)
    new_entries = managed.strip_others(
        entries, ident, forced, field_set(rt, merged, subresource=subresource) | applied
    )
    new_entries = managed.set_entry(new_entries, rt, manager, "Apply", sub=subresource, paths=applied)
    merged["metadata"]["managedFields"] = new_entries
    merged["metadata"]["resourceVersion"] = live["metadata"]["resourceVersion"]
    opts.field_manager = ""
    return core.write_update(rt, current, merged, opts, subresource=subresource)


def _conflict_error(conflicts: dict[str, list[Path]]) -> ApiError:
    total = sum(len(v) for v in conflicts.values())
    causes = [
        {"reason": "FieldManagerConflict", "message": f"conflict with {m}", "field": managed.render(p)}
        for m, paths in conflicts.items()
        for p in paths
    ]
    if total == 1:
        ((m, paths),) = conflicts.items()
        message = f"Apply failed with 1 conflict: conflict with {m}: {managed.render(paths[0])}"
    else:
        blocks = [
            f"conflicts with {m}:\n" + "\n".join(f"- {managed.render(p)}" for p in paths)
            for m, paths in conflicts.items()
        ]
        message = f"Apply failed with {total} conflicts: " + "\n".join(blocks)
    return ApiError(409, "Conflict", message, {"causes": causes})
