"""CustomResourceDefinition handling: structural checks, name acceptance, and CR schema processing.

A CR goes through the same steps the real server runs: defaults from the schema, pruning of
unknown fields (reported for fieldValidation), then validation, whose errors are mapped to the
Kubernetes cause shapes (FieldValueNotSupported, FieldValueInvalid, FieldValueRequired, ...).
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema

from gpuop_sim.apiserver import cel, crdschema
from gpuop_sim.apiserver.errors import cause
from gpuop_sim.apiserver.resources import CRD_VERBS, CustomInfo, ResourceType, Subresource
from gpuop_sim.apiserver.validation import quote

JsonObj = dict[str, Any]
_ROOT_FIELDS = ("apiVersion", "kind", "metadata")


# ---------------------------------------------------------------- the CRD object itself
def default_crd(crd: JsonObj) -> None:
    """Fill what the server defaults on a CRD create (names, conversion, initial status)."""
    spec = crd.setdefault("spec", {})
    names = spec.setdefault("names", {})
    if names.get("kind"):
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    spec.setdefault("conversion", {"strategy": "None"})
    storage = [v.get("name") for v in spec.get("versions", []) if v.get("storage")]
    crd["status"] = {
        "conditions": None,
        "acceptedNames": {"plural": "", "kind": ""},
        "storedVersions": storage,
    }


def validate_crd(crd: JsonObj) -> list[JsonObj]:
    """The 422 causes for a CRD: names and scope here, structural-schema rules in crdschema."""
    causes: list[JsonObj] = []
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    name = (crd.get("metadata") or {}).get("name", "")
    expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
    if name != expected:
        causes.append(
            cause(
                "FieldValueInvalid",
                f'Invalid value: {quote(name)}: must be spec.names.plural+"."+spec.group',
                "metadata.name",
            )
        )
    if spec.get("scope") not in ("Namespaced", "Cluster"):
        causes.append(
            cause(
                "FieldValueNotSupported",
                f"Unsupported value: {quote(spec.get('scope', ''))}: "
                'supported values: "Cluster", "Namespaced"',
                "spec.scope",
            )
        )
    return causes + crdschema.crd_problems(crd)


def accept_names(crd: JsonObj, others: list[JsonObj]) -> tuple[JsonObj, list[JsonObj]]:
    """(acceptedNames, conditions) the naming controller would set, checking other CRDs of the group."""
    spec = crd["spec"]
    names = spec.get("names", {})
    taken: dict[str, set[str]] = {
        "plural": set(),
        "singular": set(),
        "short": set(),
        "kind": set(),
        "listKind": set(),
    }
    for other in others:
        if (
            other["spec"].get("group") != spec.get("group")
            or other["metadata"]["name"] == crd["metadata"]["name"]
        ):
            continue
        acc = (other.get("status") or {}).get("acceptedNames") or {}
        taken["plural"].add(acc.get("plural", ""))
        taken["singular"].add(acc.get("singular", ""))
        taken["short"].update(acc.get("shortNames") or [])
        taken["kind"].add(acc.get("kind", ""))
        taken["listKind"].add(acc.get("listKind", ""))
    accepted: JsonObj = {"plural": "", "kind": ""}
    reason, message = "NoConflicts", "no conflicts found"
    checks = (
        ("plural", "plural", "PluralConflict"),
        ("singular", "singular", "SingularConflict"),
        ("kind", "kind", "KindConflict"),
        ("listKind", "listKind", "ListKindConflict"),
    )
    for field, bucket, why in checks:
        value = names.get(field, "")
        if value and value in taken[bucket]:
            reason, message = why, f'"{value}" is already in use'
        elif value:
            accepted[field] = value
    shorts = names.get("shortNames") or []
    clash = [s for s in shorts if s in taken["short"]]
    if clash:
        reason, message = "ShortNamesConflict", f'"{clash[0]}" is already in use'
    elif shorts:
        accepted["shortNames"] = shorts
    if names.get("categories"):
        accepted["categories"] = names["categories"]
    ok = reason == "NoConflicts"
    conditions = [
        {"type": "NamesAccepted", "status": "True" if ok else "False", "reason": reason, "message": message},
        {
            "type": "Established",
            "status": "True" if ok else "False",
            "reason": "InitialNamesAccepted" if ok else "NotAccepted",
            "message": "the initial names have been accepted" if ok else "not all names are accepted",
        },
    ]
    return accepted, conditions


def resource_types(crd: JsonObj) -> list[ResourceType]:
    """The served (group, version, plural) entries an established CRD adds."""
    spec = crd["spec"]
    names = spec["names"]
    out: list[ResourceType] = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subs = version.get("subresources") or {}
        schema = (version.get("schema") or {}).get("openAPIV3Schema") or {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
        }
        info = CustomInfo(
            schema=schema,
            status_subresource="status" in subs,
            selectable_fields=tuple(f["jsonPath"].lstrip(".") for f in version.get("selectableFields") or []),
            printer_columns=tuple(version.get("additionalPrinterColumns") or []),
            crd_name=crd["metadata"]["name"],
            scale=subs.get("scale") if isinstance(subs.get("scale"), dict) else None,
        )
        subresources: tuple[Subresource, ...] = ()
        if "status" in subs:
            subresources += (Subresource("status", names["kind"]),)
        if "scale" in subs:
            subresources += (Subresource("scale", "Scale", ("get", "patch", "update"), "autoscaling", "v1"),)
        out.append(
            ResourceType(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=subresources,
                verbs=CRD_VERBS,
                singular=names.get("singular", ""),
                custom=info,
            )
        )
    return out


# ---------------------------------------------------------------- custom resources
def apply_defaults(value: Any, schema: JsonObj) -> None:
    """Schema `default`s, recursively, in place, then nulls the schema does not allow dropped.

    As the real server: a missing field gets its default; a null on a `nullable` field is kept
    (not defaulted); a null on a non-nullable field is replaced by its default, or pruned when
    there is none.
    """
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for name, sub in props.items():
            non_nullable_null = name in value and value[name] is None and not sub.get("nullable")
            if "default" in sub and (name not in value or non_nullable_null):
                value[name] = copy.deepcopy(sub["default"])
            elif non_nullable_null:
                del value[name]
            if name in value:
                apply_defaults(value[name], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for name, item in value.items():
                if name not in props:
                    apply_defaults(item, extra)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


def prune(value: Any, schema: JsonObj, path: str = "") -> list[str]:
    """Drop fields the schema does not declare, in place; returns their dotted paths."""
    unknown: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return unknown
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for name in list(value):
            child = f"{path}.{name}" if path else name
            if not path and name in _ROOT_FIELDS:
                continue
            if props is not None and name in props:
                unknown += prune(value[name], props[name], child)
            elif isinstance(extra, dict):
                unknown += prune(value[name], extra, child)
            elif extra is True:
                continue
            elif props is not None or schema.get("type") == "object":
                del value[name]
                unknown.append(child)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            unknown += prune(item, schema["items"], f"{path}[{i}]")
    return unknown


def to_jsonschema(schema: Any) -> Any:
    """OpenAPI v3 structural schema -> JSON Schema draft 7 (nullable, int-or-string, x- keys)."""
    if isinstance(schema, list):
        return [to_jsonschema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: JsonObj = {}
    for key, value in schema.items():
        if key.startswith("x-kubernetes-") or key in (
            "nullable",
            "format",
            "default",
            "description",
            "example",
        ):
            continue
        if key in ("properties", "patternProperties"):
            out[key] = {k: to_jsonschema(v) for k, v in value.items()}
        else:
            out[key] = to_jsonschema(value)
    if schema.get("x-kubernetes-int-or-string"):
        # The real server checks the combined type first, then any anyOf the schema declares.
        out.pop("type", None)
        out = {"type": ["integer", "string"], **out}
    if schema.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out


_JSON_TYPES = (
    (bool, "boolean"),
    (int, "integer"),
    (float, "number"),
    (str, "string"),
    (list, "array"),
    (dict, "object"),
)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return next(name for typ, name in _JSON_TYPES if isinstance(value, typ))


def _field(path: list[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def validate_cr(obj: JsonObj, schema: JsonObj, *, only: str | None = None) -> list[JsonObj]:
    """Schema violations as Kubernetes causes; `only` limits them to one top-level field."""
    body = {k: v for k, v in obj.items() if k not in _ROOT_FIELDS}
    validator = jsonschema.Draft7Validator(
        to_jsonschema(
            {
                **schema,
                "properties": {
                    k: v for k, v in (schema.get("properties") or {}).items() if k not in _ROOT_FIELDS
                },
            }
        )
    )
    causes: list[JsonObj] = [] if only is not None else metadata_causes(obj, schema)
    for err in sorted(validator.iter_errors(body), key=lambda e: [str(p) for p in e.absolute_path]):
        path = list(err.absolute_path)
        if (
            only is not None
            and (not path or path[0] != only)
            and not (not path and err.validator == "required")
        ):
            continue
        causes += to_causes(err, path)
    if not causes:
        # CEL rules run on values the schema accepted (as the real server's ordering implies).
        rule_causes = cel.cr_rule_causes(body, schema)
        causes += [c for c in rule_causes if only is None or c["field"].split(".")[0].split("[")[0] == only]
    return causes


def metadata_causes(obj: JsonObj, schema: JsonObj) -> list[JsonObj]:
    """The root `metadata` schema may restrict only `name` and `generateName`; CRs obey it."""
    declared = ((schema.get("properties") or {}).get("metadata") or {}).get("properties") or {}
    meta = obj.get("metadata") or {}
    causes: list[JsonObj] = []
    for field in ("name", "generateName"):
        if field not in declared or not isinstance(meta.get(field), str):
            continue
        validator = jsonschema.Draft7Validator(to_jsonschema(declared[field]))
        for err in validator.iter_errors(meta[field]):
            causes += to_causes(err, ["metadata", field])
    return causes


def to_causes(err: jsonschema.ValidationError, path: list[Any]) -> list[JsonObj]:
    field = _field(path)
    # status is validated against its own sub-schema, so its messages drop the "status." prefix.
    shown = field[len("status.") :] if field.startswith("status.") else field
    value = err.instance
    kind = err.validator
    arg: Any = err.validator_value
    if kind == "required":
        present = value if isinstance(value, dict) else {}
        return [
            cause("FieldValueRequired", "Required value", _field([*path, name]))
            for name in arg
            if name not in present
        ]
    if kind == "enum":
        # Every enum value is listed as a quoted string, whatever its JSON type (`"1"` for 1).
        allowed = ", ".join(quote(v if isinstance(v, str) else quote(v)) for v in arg)
        return [
            cause(
                "FieldValueNotSupported",
                f"Unsupported value: {quote(value)}: supported values: {allowed}",
                field,
            )
        ]
    if kind == "type":
        want = arg if isinstance(arg, str) else ",".join(t for t in arg if t != "null")
        got = _json_type(value)
        return [
            cause(
                "FieldValueTypeInvalid",
                f'Invalid value: "{got}": {shown} in body must be of type {want}: "{got}"',
                field,
            )
        ]
    templates = {
        "minimum": "should be greater than or equal to {arg}",
        "maximum": "should be less than or equal to {arg}",
        "exclusiveMinimum": "should be greater than {arg}",
        "exclusiveMaximum": "should be less than {arg}",
        "pattern": "should match '{arg}'",
        "minLength": "should be at least {arg} chars long",
        "minItems": "should have at least {arg} items",
        "minProperties": "should have at least {arg} properties",
        "multipleOf": "should be a multiple of {arg}",
    }
    if kind in templates:
        msg = templates[kind].format(arg=arg)
        count = len(value) if kind == "minItems" and isinstance(value, list) else value
        return [cause("FieldValueInvalid", f"Invalid value: {quote(count)}: {shown} in body {msg}", field)]
    if kind == "anyOf":
        # The anyOf cause has no field (Go prints a nil path as <nil>); the first branch's
        # errors follow it.
        first = [e for e in err.context or [] if e.schema_path and e.schema_path[0] == 0]
        own = cause(
            "FieldValueInvalid",
            f'Invalid value: "": "{shown}" must validate at least one schema (anyOf)',
            "<nil>",
        )
        return [own] + [c for e in first for c in to_causes(e, path + list(e.relative_path))]
    if kind == "maxLength":
        return [cause("FieldValueTooLong", f"Too long: may not be more than {arg} bytes", field)]
    if kind in ("maxItems", "maxProperties"):
        n = len(value) if isinstance(value, list | dict) else value
        return [cause("FieldValueTooMany", f"Too many: {n}: must have at most {arg} items", field)]
    return [cause("FieldValueInvalid", f"Invalid value: {quote(value)}: {err.message}", field)]


def column_value(obj: JsonObj, json_path: str) -> Any:
    """Evaluate a simple `.a.b.c` printer-column JSONPath."""
    cur: Any = obj
    for part in json_path.strip().lstrip(".").split("."):
        if not part:
            continue
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur
