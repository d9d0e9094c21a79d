"""Structural OpenAPI schema generated from the config models: shape, and agreement with the models."""

from __future__ import annotations

import copy
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from gpuop_common.config import (
    DeviceConfigSpec,
    SchemaConversionError,
    device_config_openapi_schema,
    structural_problems,
    structural_schema,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError

SPEC_SCHEMA = structural_schema(DeviceConfigSpec)
STRICT_SCHEMA = structural_schema(DeviceConfigSpec, forbid_unknown=True)
VALIDATOR = jsonschema.Draft202012Validator(STRICT_SCHEMA)


def _walk(schema: dict[str, Any], path: str = "spec") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from _walk(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _walk(schema["additionalProperties"], f"{path}.*")


def test_schema_is_structural() -> None:
    assert structural_problems(SPEC_SCHEMA) == []
    text = json.dumps(SPEC_SCHEMA)
    assert "$ref" not in text
    assert '"title"' not in text
    assert '"null"' not in text
    for path, node in _walk(SPEC_SCHEMA):
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
        else:
            assert "type" in node, path


def test_every_property_is_described_and_camel_case() -> None:
    for path, node in _walk(SPEC_SCHEMA):
        for name, child in node.get("properties", {}).items():
            assert child.get("description"), f"{path}.{name} has no description"
            assert "_" not in name, f"{path}.{name} is not camelCase"


def test_schema_is_a_valid_json_schema_and_accepts_the_defaults() -> None:
    jsonschema.Draft202012Validator.check_schema(STRICT_SCHEMA)
    VALIDATOR.validate(DeviceConfigSpec().to_wire())
    VALIDATOR.validate({})


def test_crd_schema_wraps_spec_and_status() -> None:
    crd = device_config_openapi_schema()
    assert structural_problems(crd) == []
    assert crd["properties"]["spec"] == SPEC_SCHEMA
    assert crd["properties"]["status"]["x-kubernetes-preserve-unknown-fields"] is True


def _leaf_paths(kind: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (path, node)
        for path, node in _walk(SPEC_SCHEMA)
        if node.get("type") == kind and "[]" not in path and ".*" not in path
    ]


def _with(path: str, value: Any) -> dict[str, Any]:
    data: dict[str, Any] = {}
    node = data
    *parents, leaf = path.split(".")[1:]
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return data


def _model_accepts(data: dict[str, Any]) -> bool:
    try:
        DeviceConfigSpec.model_validate(data)
    except ValidationError:
        return False
    return True


def _schema_accepts(data: dict[str, Any]) -> bool:
    return VALIDATOR.is_valid(data)


INTEGER_CASES = [
    (path, value)
    for path, node in _leaf_paths("integer")
    for value in (
        node.get("minimum", 0) - 1,
        node.get("minimum", 0),
        node.get("maximum", 10**6),
        node.get("maximum", 10**6) + 1,
    )
]


@pytest.mark.parametrize(("path", "value"), INTEGER_CASES, ids=[f"{p}={v}" for p, v in INTEGER_CASES])
def test_integer_bounds_agree_with_model(path: str, value: int) -> None:
    data = _with(path, value)
    assert _model_accepts(data) == _schema_accepts(data)


ENUM_PATHS = [(path, node["enum"]) for path, node in _leaf_paths("string") if "enum" in node]


@pytest.mark.parametrize(("path", "allowed"), ENUM_PATHS, ids=[p for p, _ in ENUM_PATHS])
def test_enums_agree_with_model(path: str, allowed: list[str]) -> None:
    bad = _with(path, "not-a-" + allowed[0])
    assert not _model_accepts(bad)
    assert not _schema_accepts(bad)
    for value in allowed:
        good = _with(path, value)
        # Cross-field rules may still reject a value the schema allows; field-level they agree.
        assert _schema_accepts(good)


PATTERN_PATHS = [path for path, node in _leaf_paths("string") if "pattern" in node]


@settings(max_examples=60, deadline=None, derandomize=True)
# Python's `re` (used by jsonschema) lets `$` match before a final newline; RE2 (the apiserver) and
# pydantic's regex engine do not, so such strings are left out of the comparison.
@given(st.sampled_from(PATTERN_PATHS), st.text(max_size=40).filter(lambda text: not text.endswith("\n")))
def test_patterns_agree_with_model(path: str, value: str) -> None:
    data = _with(path, value)
    assert _model_accepts(data) == _schema_accepts(data), (path, value)


REJECTED_BY_BOTH = [
    {"driver": {"kernelModuleParameters": ["no-value"]}},
    {"driver": {"upgradePolicy": {"maxUnavailableNodes": "120%"}}},
    {"driver": {"upgradePolicy": {"maxUnavailableNodes": "many"}}},
    {"devicePlugin": {"health": {"ignoredXids": [-3]}}},
    {"devicePlugin": {"resourceFilter": {"pciAddresses": ["03:00.0"]}}},
    {
        "devicePlugin": {
            "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 1}]}}
        }
    },
    {"metricsExporter": {"fieldsAllow": ["gpu-temp"]}},
    {"configManager": {"profiles": [{"name": "p", "amd": {"computePartition": "XPX"}}]}},
    {"configManager": {"profiles": [{"name": "p", "nvidia": [{"migDevices": {"1g.10gb": 9}}]}]}},
    {"nodeLabeller": {"labelSets": ["intel"]}},
    {"driver": {"unknownField": 1}},
]


@pytest.mark.parametrize("data", REJECTED_BY_BOTH, ids=[json.dumps(d) for d in REJECTED_BY_BOTH])
def test_nested_violations_rejected_by_model_and_schema(data: dict[str, Any]) -> None:
    assert not _model_accepts(data)
    assert not _schema_accepts(data)


def test_map_keys_are_checked_by_the_model_not_by_cel_in_the_crd() -> None:
    # A CEL rule over every map key is over the real apiserver's cost budget (keys have no declared
    # length), so the CRD carries none; the model checks the keys, and the jsonschema form
    # (Helm values) has them as propertyNames.
    assert "x-kubernetes-validations" not in json.dumps(SPEC_SCHEMA)
    assert "propertyNames" not in json.dumps(SPEC_SCHEMA)
    strict_labels = STRICT_SCHEMA["properties"]["selector"]["properties"]["matchLabels"]
    assert strict_labels["propertyNames"]["pattern"].startswith("^")
    assert strict_labels["propertyNames"]["maxLength"] == 317
    for bad in (
        {"selector": {"matchLabels": {"bad key!": "x"}}},
        {"selector": {"matchLabels": {"a" * 318: "x"}}},
        {"metricsExporter": {"extraLabels": {"bad-label": "x"}}},
    ):
        assert not _model_accepts(bad), bad
        assert not _schema_accepts(bad), bad


def test_int_or_string_accepts_both_forms() -> None:
    for value in (2, "25%", "3"):
        data = {"driver": {"upgradePolicy": {"maxUnavailableNodes": value}}}
        assert _model_accepts(data) and _schema_accepts(data)


def test_full_examples_validate_against_schema() -> None:
    # Test modules are not importable by name under --import-mode=importlib; load the sibling file.
    spec = importlib.util.spec_from_file_location(
        "config_examples", Path(__file__).with_name("test_config_models.py")
    )
    assert spec is not None and spec.loader is not None
    examples = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(examples)
    for example in (examples.AMD_SPEC, examples.NVIDIA_SPEC):
        VALIDATOR.validate(copy.deepcopy(example))


def test_unstructural_models_are_refused_with_the_path() -> None:
    class Union(BaseModel):
        value: int | str = Field(description="either")

    class Exclusive(BaseModel):
        value: int = Field(gt=0, description="positive")

    with pytest.raises(SchemaConversionError, match=r"Union\.value"):
        structural_schema(Union)
    with pytest.raises(SchemaConversionError, match="exclusiveMinimum"):
        structural_schema(Exclusive)


def test_free_form_maps_preserve_unknown_fields() -> None:
    class Loose(BaseModel):
        extra_vars: dict[str, Any] = Field(default_factory=dict, description="free-form")

    schema = structural_schema(Loose)
    assert schema["properties"]["extra_vars"]["x-kubernetes-preserve-unknown-fields"] is True
