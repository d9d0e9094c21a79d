"""Structural rules kube-apiserver enforces on a CustomResourceDefinition (pure functions).

`crd_problems(crd)` returns the causes (reason, message, field) the real server puts in its 422
for a CRD create or update, with the same field paths and message text (pinned by the golden
transcripts in `crd-validation.jsonl`). The simulated API server calls it, and tests call it on
the CRD we generate, so a CRD a real cluster refuses fails a test here.

Covered: root `metadata` restrictions, every node typed, `additionalProperties` beside
`properties`, `x-kubernetes-list-type: map` keys (present, and each key required or defaulted),
defaults valid against their own schema, exactly one storage version, scale subresource paths,
`selectableFields` paths, and CEL rules (compile errors and the cost budget, in `cel`).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from gpuop_sim.apiserver.errors import cause

JsonObj = dict[str, Any]
_METADATA_FORBIDDEN = (
    "Forbidden: must not specify anything other than name and generateName,"
    " but metadata is implicitly specified"
)


def crd_problems(crd: JsonObj) -> list[JsonObj]:
    """Every structural-rule violation of `crd`, in the order the real server reports them."""
    spec = crd.get("spec") or {}
    versions = [v for v in spec.get("versions") or [] if isinstance(v, dict)]
    hoisted = _hoisted(versions)
    causes: list[JsonObj] = []
    causes += _storage_problems(versions)
    for index, version in enumerate(versions):
        if not hoisted or index == 0:
            base = "spec" if hoisted else f"spec.versions[{index}]"
            schema_path = "spec.validation.openAPIV3Schema" if hoisted else f"{base}.schema.openAPIV3Schema"
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            if isinstance(schema, dict):
                causes += schema_problems(schema, schema_path)
            causes += _subresource_problems(version.get("subresources") or {}, base)
            causes += _selectable_problems(version.get("selectableFields") or [], schema, base)
    return causes


def schema_problems(schema: JsonObj, path: str = "spec.validation.openAPIV3Schema") -> list[JsonObj]:
    """Violations inside one `openAPIV3Schema` (the root node is `path`)."""
    # Imported here: cel imports errors only, but keeps celpy off the import path of this module.
    from gpuop_sim.apiserver import cel

    causes = _metadata_problems(schema, path)
    causes += _node_problems(schema, path, root=True)
    causes += cel.crd_rule_problems(schema, path)
    return causes


def _hoisted(versions: list[JsonObj]) -> bool:
    # The server moves per-version schema/subresources/selectableFields up to spec.* when all
    # versions agree, and then names spec.validation / spec.subresources in its errors.
    keys = ("schema", "subresources", "selectableFields")
    return all(all(v.get(k) == versions[0].get(k) for k in keys) for v in versions)


def _metadata_problems(schema: JsonObj, path: str) -> list[JsonObj]:
    metadata = (schema.get("properties") or {}).get("metadata")
    if not isinstance(metadata, dict):
        return []
    allowed = set(metadata) <= {"type", "properties"} and metadata.get("type", "object") == "object"
    if set(metadata.get("properties") or {}) - {"name", "generateName"}:
        allowed = False
    if allowed:
        return []
    return [cause("FieldValueForbidden", _METADATA_FORBIDDEN, f"{path}.properties[metadata]")]


def _node_problems(schema: JsonObj, path: str, *, root: bool = False) -> list[JsonObj]:
    causes: list[JsonObj] = []
    untyped_ok = schema.get("x-kubernetes-int-or-string") or schema.get(
        "x-kubernetes-preserve-unknown-fields"
    )
    if not root and not schema.get("type") and not untyped_ok:
        causes.append(
            cause(
                "FieldValueRequired",
                "Required value: must not be empty for specified object fields",
                path + ".type",
            )
        )
    if (
        "properties" in schema
        and "additionalProperties" in schema
        and schema["additionalProperties"] is not False
    ):
        causes.append(
            cause(
                "FieldValueForbidden",
                "Forbidden: additionalProperties and properties are mutual exclusive",
                path + ".additionalProperties",
            )
        )
    if "default" in schema:
        causes += _default_problems(schema, path)
    causes += _list_map_problems(schema, path)
    for prop, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, dict):
            causes += _node_problems(sub, f"{path}.properties[{prop}]")
    if isinstance(schema.get("items"), dict):
        causes += _node_problems(schema["items"], path + ".items")
    if isinstance(schema.get("additionalProperties"), dict):
        causes += _node_problems(schema["additionalProperties"], path + ".additionalProperties")
    return causes


def _default_problems(schema: JsonObj, path: str) -> list[JsonObj]:
    # Imported here: crd.py imports this module for validate_crd.
    from gpuop_sim.apiserver import crd

    value = schema["default"]
    if value is None and schema.get("nullable"):
        return []
    validator = jsonschema.Draft7Validator(crd.to_jsonschema(schema))
    errors = sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path])
    causes: list[JsonObj] = []
    for err in errors:
        for found in crd.to_causes(err, list(err.absolute_path)):
            causes.append({**found, "field": path + ".default"})
    return causes[:1]


def _list_map_problems(schema: JsonObj, path: str) -> list[JsonObj]:
    if schema.get("x-kubernetes-list-type") != "map":
        return []
    keys = schema.get("x-kubernetes-list-map-keys") or []
    if not keys:
        return [
            cause(
                "FieldValueRequired",
                "Required value: must not be empty if x-kubernetes-list-type is map",
                path + ".x-kubernetes-list-map-keys",
            )
        ]
    raw_items = schema.get("items")
    items: JsonObj = raw_items if isinstance(raw_items, dict) else {}
    required = set(items.get("required") or [])
    causes = []
    for key in keys:
        prop = (items.get("properties") or {}).get(key)
        if isinstance(prop, dict) and key not in required and "default" not in prop:
            causes.append(
                cause(
                    "FieldValueRequired",
                    "Required value: this property is in x-kubernetes-list-map-keys, "
                    "so it must have a default or be a required property",
                    f"{path}.items.properties[{key}].default",
                )
            )
    return causes


def _go_json(value: Any) -> str:
    """encoding/json output: compact, with <, > and & escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _storage_problems(versions: list[JsonObj]) -> list[JsonObj]:
    storage = [v.get("name", "") for v in versions if v.get("storage")]
    if len(storage) == 1 or not versions:
        return []
    # The message dumps the internal versions; schema, subresources and columns are hoisted out.
    dumped = [
        {
            "Name": v.get("name", ""),
            "Served": bool(v.get("served")),
            "Storage": bool(v.get("storage")),
            "Deprecated": bool(v.get("deprecated")),
            "DeprecationWarning": v.get("deprecationWarning"),
            "Schema": None,
            "Subresources": None,
            "AdditionalPrinterColumns": None,
            "SelectableFields": None,
        }
        for v in versions
    ]
    causes = [
        cause(
            "FieldValueInvalid",
            f"Invalid value: {_go_json(dumped)}: must have exactly one version marked as storage version",
            "spec.versions",
        )
    ]
    # On create the server stores the first storage version; the check wants the last one.
    stored = storage[:1]
    if storage and storage[-1] not in stored:
        causes.append(
            cause(
                "FieldValueInvalid",
                f"Invalid value: {_go_json(stored)}: must have the storage version {storage[-1]}",
                "status.storedVersions",
            )
        )
    return causes


def _json_path_problem(value: str, under: str) -> str | None:
    if not value.startswith("."):
        return "must be a simple json path starting with ."
    if not value.startswith(f".{under}."):
        return f"should be a json path under .{under}"
    return None


def _subresource_problems(subresources: JsonObj, base: str) -> list[JsonObj]:
    scale = subresources.get("scale")
    if not isinstance(scale, dict):
        return []
    causes = []
    for key, under in (("specReplicasPath", "spec"), ("statusReplicasPath", "status")):
        value = scale.get(key, "")
        problem = _json_path_problem(value, under)
        if problem:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    f"Invalid value: {json.dumps(value)}: {problem}",
                    f"{base}.subresources.scale.{key}",
                )
            )
    selector = scale.get("labelSelectorPath")
    if selector and _json_path_problem(selector, "spec") and _json_path_problem(selector, "status"):
        causes.append(
            cause(
                "FieldValueInvalid",
                f"Invalid value: {json.dumps(selector)}: should be a json path under either .spec or .status",
                f"{base}.subresources.scale.labelSelectorPath",
            )
        )
    return causes


def _schema_at(schema: Any, json_path: str) -> Any:
    node = schema
    for part in json_path.lstrip(".").split("."):
        if not isinstance(node, dict):
            return None
        node = (node.get("properties") or {}).get(part)
    return node


def _selectable_problems(fields: list[Any], schema: Any, base: str) -> list[JsonObj]:
    causes = []
    for index, field in enumerate(fields):
        path = (field or {}).get("jsonPath", "") if isinstance(field, dict) else ""
        if isinstance(schema, dict) and _schema_at(schema, path) is None:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    f"Invalid value: {json.dumps(path)}: is an invalid path: does not refer to a valid field",
                    f"{base}.selectableFields[{index}].jsonPath",
                )
            )
    return causes
