"""Kubernetes structural OpenAPI v3 schemas generated from the config models, for the CRD.

pydantic emits JSON Schema 2020-12 with `$defs`/`$ref`, `anyOf` for optionals and titles; a CRD needs
a *structural* schema: every node typed, everything inlined, no unions (the only allowed `anyOf` is
the int-or-string form). Optional fields become their inner type: an omitted field is None in the
model, and the apiserver prunes explicit nulls on non-nullable fields. Unknown fields are pruned by
the apiserver (or rejected with fieldValidation=Strict); pass `forbid_unknown=True` to get
`additionalProperties: false` instead, for validating with the `jsonschema` library.

Map key constraints stay out of the CRD: a structural schema has no `propertyNames`, and a CEL rule
over every key of a map (`self.all(k, k.matches(...))`) is costed by the real apiserver at the
largest request size, so the CRD is refused for exceeding the CEL cost budget. The operator's
pydantic validation checks the keys and reports the field in its InvalidSpec condition. For the
`jsonschema` form (`forbid_unknown=True`, the Helm values schema) they become `propertyNames`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

JsonSchema = dict[str, Any]

_KEPT_KEYWORDS = (
    "type",
    "description",
    "default",
    "enum",
    "pattern",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
)
_UNSUPPORTED_KEYWORDS = ("exclusiveMinimum", "exclusiveMaximum", "oneOf", "allOf", "not", "multipleOf")
_INT_OR_STRING = "x-kubernetes-int-or-string"
_PRESERVE_UNKNOWN = "x-kubernetes-preserve-unknown-fields"


class SchemaConversionError(ValueError):
    """A model uses a construct a structural schema cannot express; names the JSON path."""


class _Converter:
    def __init__(self, definitions: dict[str, JsonSchema], forbid_unknown: bool) -> None:
        self._definitions = definitions
        self._forbid_unknown = forbid_unknown

    def _resolve(self, node: JsonSchema, path: str) -> JsonSchema:
        ref = node.get("$ref")
        if ref is None:
            return node
        name = ref.rsplit("/", 1)[-1]
        if name not in self._definitions:
            raise SchemaConversionError(f"{path}: unresolvable $ref {ref}")
        siblings = {key: value for key, value in node.items() if key != "$ref"}
        return {**self._definitions[name], **siblings}

    def convert(self, node: JsonSchema, path: str) -> JsonSchema:
        node = self._resolve(node, path)
        for keyword in _UNSUPPORTED_KEYWORDS:
            if keyword in node:
                raise SchemaConversionError(f"{path}: {keyword} has no structural-schema equivalent")
        if node.get(_INT_OR_STRING):
            kept: JsonSchema = {
                key: node[key] for key in ("description", "default", "pattern") if key in node
            }
            return {_INT_OR_STRING: True, "anyOf": [{"type": "integer"}, {"type": "string"}], **kept}
        if "anyOf" in node:
            return self._optional(node, path)
        if "const" in node:
            node = {**node, "enum": [node["const"]]}
        out: JsonSchema = {key: node[key] for key in _KEPT_KEYWORDS if key in node}
        if "enum" in out and "type" not in out:
            out["type"] = _enum_type(out["enum"], path)
        kind = out.get("type")
        if kind == "object":
            out.update(self._object(node, path))
        elif kind == "array":
            if "items" not in node:
                raise SchemaConversionError(f"{path}: array without an item type")
            out["items"] = self.convert(node["items"], f"{path}[]")
        elif kind is None:
            raise SchemaConversionError(f"{path}: no type (a field typed Any?)")
        return out

    def _optional(self, node: JsonSchema, path: str) -> JsonSchema:
        branches = [branch for branch in node["anyOf"] if branch != {"type": "null"}]
        if len(branches) != 1:
            raise SchemaConversionError(f"{path}: unions of several types are not structural")
        inner = self.convert(branches[0], path)
        for key in ("description",):
            if key in node:
                inner[key] = node[key]
        if node.get("default") is not None:
            inner["default"] = node["default"]
        return inner

    def _object(self, node: JsonSchema, path: str) -> JsonSchema:
        out: JsonSchema = {}
        properties = node.get("properties", {})
        extra = node.get("additionalProperties")
        if properties:
            out["properties"] = {
                name: self.convert(child, f"{path}.{name}") for name, child in properties.items()
            }
            if node.get("required"):
                out["required"] = list(node["required"])
            if self._forbid_unknown and extra is False:
                out["additionalProperties"] = False
        elif isinstance(extra, dict) and extra:
            out["additionalProperties"] = self.convert(extra, f"{path}.*")
            out.update(self._key_rules(node.get("propertyNames", {}), None))
        elif node.get("patternProperties"):
            patterns = node["patternProperties"]
            if len(patterns) != 1:
                raise SchemaConversionError(f"{path}: several key patterns are not structural")
            ((key_pattern, value_schema),) = patterns.items()
            out["additionalProperties"] = self.convert(value_schema, f"{path}.*")
            out.update(self._key_rules(node.get("propertyNames", {}), key_pattern))
        else:
            # dict[str, Any]: genuinely free-form content the apiserver must keep as is.
            out[_PRESERVE_UNKNOWN] = True
        return out

    def _key_rules(self, property_names: JsonSchema, key_pattern: str | None) -> JsonSchema:
        """Map key constraints: JSON Schema `propertyNames` for jsonschema; none in a CRD (see above)."""
        if not self._forbid_unknown:
            return {}
        rules: JsonSchema = {}
        pattern = key_pattern or property_names.get("pattern")
        if pattern:
            rules["pattern"] = pattern
        if "maxLength" in property_names:
            rules["maxLength"] = property_names["maxLength"]
        return {"propertyNames": rules} if rules else {}


def _enum_type(values: list[Any], path: str) -> str:
    kinds = {type(value) for value in values}
    if kinds == {str}:
        return "string"
    if kinds == {int}:
        return "integer"
    if kinds == {bool}:
        return "boolean"
    raise SchemaConversionError(f"{path}: enum mixes value types")


def structural_schema(model: type[BaseModel], *, forbid_unknown: bool = False) -> JsonSchema:
    """The structural OpenAPI v3 schema of `model` (camelCase names), ready for a CRD."""
    generated = model.model_json_schema(by_alias=True, mode="validation")
    definitions = generated.pop("$defs", {})
    return _Converter(definitions, forbid_unknown).convert(generated, model.__name__)


def structural_problems(schema: JsonSchema, path: str = "") -> list[str]:
    """Ways in which `schema` is not structural (empty list when it is): for tests and CRD checks."""
    problems = []
    if "$ref" in schema:
        problems.append(f"{path}: $ref")
    int_or_string = schema.get(_INT_OR_STRING) is True
    if "anyOf" in schema and not int_or_string:
        problems.append(f"{path}: anyOf outside int-or-string")
    if "type" not in schema and not int_or_string and not schema.get(_PRESERVE_UNKNOWN):
        problems.append(f"{path}: no type")
    if "properties" in schema and isinstance(schema.get("additionalProperties"), dict):
        problems.append(f"{path}: both properties and additionalProperties")
    for name, child in schema.get("properties", {}).items():
        problems.extend(structural_problems(child, f"{path}.{name}"))
    if isinstance(schema.get("items"), dict):
        problems.extend(structural_problems(schema["items"], f"{path}[]"))
    if isinstance(schema.get("additionalProperties"), dict):
        problems.extend(structural_problems(schema["additionalProperties"], f"{path}.*"))
    return problems


def device_config_openapi_schema(status: JsonSchema | None = None) -> JsonSchema:
    """`openAPIV3Schema` of the DeviceConfig CRD: spec from the models, status as given by the operator."""
    from gpuop_common.config.spec import DeviceConfigSpec

    return {
        "type": "object",
        "description": "GPU stack (driver and operands) for the nodes the selector matches.",
        "properties": {
            "apiVersion": {"type": "string", "description": "API version of this object."},
            "kind": {"type": "string", "description": "Kind of this object."},
            # Only `type` (and restrictions on name/generateName) may be set on root metadata.
            "metadata": {"type": "object"},
            "spec": structural_schema(DeviceConfigSpec),
            "status": status
            if status is not None
            else {
                "type": "object",
                "description": "Observed state, written by the operator.",
                _PRESERVE_UNKNOWN: True,
            },
        },
    }
