"""CEL `x-kubernetes-validations` in the simulated API server: compile errors, the cost budget,
and rule evaluation on CRs (pure functions; the transcripts in crd-validation.jsonl pin the
same cases end to end over HTTP)."""

from __future__ import annotations

from typing import Any

from gpuop_sim.apiserver import cel
from gpuop_sim.apiserver.crd import validate_cr

LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)
KEY_RULE = f"self.all(k, k.matches(r'{LABEL_KEY}'))"
ROOT = "spec.validation.openAPIV3Schema"


def _string_map(**bounds: Any) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": {"type": "string", "maxLength": 63}, **bounds}


def _schema(spec: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {"spec": spec}}


def test_a_rule_that_does_not_parse_gets_cel_gos_message() -> None:
    """Bad input: `self.size > ` (ends after an operator)."""
    compiled = cel.compile_rule("self.size > ")
    assert compiled.program is None
    assert compiled.error == (
        "compilation failed: ERROR: <input>:1:13: Syntax error: mismatched input '<EOF>' expecting "
        "{'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, "
        "BYTES, IDENTIFIER}\n | self.size > \n | ............^"
    )


def test_an_unexpected_token_and_a_stray_character_are_named() -> None:
    """Bad inputs: `self.a ) 1` (a stray parenthesis) and `self.$` (not a CEL character)."""
    assert "mismatched input ')'" in cel.compile_rule("self.a ) 1").error
    assert "token recognition error at: '$'" in cel.compile_rule("self.$").error


def test_crd_compile_error_dumps_the_rule_as_go_does() -> None:
    schema = _schema(
        {
            "type": "object",
            "properties": {"size": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.size > ", "message": "size is too small"}],
        }
    )
    [problem] = cel.crd_rule_problems(schema, ROOT)
    assert problem["field"] == f"{ROOT}.properties[spec].x-kubernetes-validations[0].rule"
    assert problem["message"].startswith(
        'Invalid value: {"Rule":"self.size \\u003e ","Message":"size is too small","MessageExpression":"",'
        '"Reason":null,"FieldPath":"","OptionalOldSelf":null}: compilation failed: '
    )


def test_unbounded_map_key_regex_costs_what_the_real_server_estimates() -> None:
    # (3 MiB - 2) / 8 bytes per entry = 393215 keys, 33 per key, plus reading the range and result.
    assert cel.max_elements(_string_map()) == 393215
    cost = cel.rule_cost(cel.compile_rule(KEY_RULE).tree, _string_map())  # type: ignore[arg-type]
    assert cost == 393215 * 33 + 2
    [problem] = cel.crd_rule_problems(
        _schema(
            {
                "type": "object",
                "properties": {"labels": {**_string_map(), "x-kubernetes-validations": [{"rule": KEY_RULE}]}},
            }
        ),
        ROOT,
    )
    assert problem["reason"] == "FieldValueForbidden"
    assert "exceeds budget by factor of 1.297610x (try simplifying the rule" in problem["message"]


def test_max_properties_bounds_the_cost() -> None:
    bounded = {**_string_map(maxProperties=64), "x-kubernetes-validations": [{"rule": KEY_RULE}]}
    assert cel.crd_rule_problems(_schema({"type": "object", "properties": {"labels": bounded}}), ROOT) == []


def test_a_rule_inside_a_list_is_multiplied_by_its_items_and_counts_toward_the_total() -> None:
    selector = {**_string_map(), "x-kubernetes-validations": [{"rule": KEY_RULE}]}
    profiles = {
        "type": "array",
        "maxItems": 128,
        "items": {"type": "object", "properties": {"nodeSelector": selector}},
    }
    causes = cel.crd_rule_problems(_schema({"type": "object", "properties": {"profiles": profiles}}), ROOT)
    rule = (
        f"{ROOT}.properties[spec].properties[profiles].items.properties[nodeSelector]"
        ".x-kubernetes-validations[0].rule"
    )
    assert [c["field"] for c in causes] == [rule, rule, ROOT]
    assert "factor of more than 100x" in causes[0]["message"]
    assert causes[1]["message"] == (
        "Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
    )
    assert "exceeds budget by factor of 16.6x" in causes[2]["message"]


def test_size_bound_rule_in_a_list_is_thirty_times_over() -> None:
    """The issue's `size(k) <= 317` rule on profiles[].nodeSelector: 6 per key, 30.2x."""
    selector = {**_string_map(), "x-kubernetes-validations": [{"rule": "self.all(k, size(k) <= 317)"}]}
    profiles = {
        "type": "array",
        "maxItems": 128,
        "items": {"type": "object", "properties": {"nodeSelector": selector}},
    }
    causes = cel.crd_rule_problems(_schema({"type": "object", "properties": {"profiles": profiles}}), ROOT)
    assert "factor of 30.2x" in causes[0]["message"]


def test_cr_rules_reject_with_message_reason_and_field_path() -> None:
    """Bad inputs: min above max, and a missing field the rule reads."""
    spec = {
        "type": "object",
        "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}},
        "x-kubernetes-validations": [
            {"rule": "self.min <= self.max", "message": "min must not exceed max"},
            {"rule": "self.max < 100", "reason": "FieldValueForbidden", "fieldPath": ".max"},
        ],
    }
    schema = _schema(spec)
    assert validate_cr({"spec": {"min": 1, "max": 5}}, schema) == []
    assert validate_cr({"spec": {"min": 300, "max": 200}}, schema) == [
        {"reason": "FieldValueInvalid", "message": "Invalid value: min must not exceed max", "field": "spec"},
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: failed rule: self.max < 100",
            "field": "spec.max",
        },
    ]
    [missing] = validate_cr({"spec": {"min": 1}}, schema)[:1]
    assert missing["field"] == "spec" and "max" in missing["message"]


def test_rules_inside_lists_run_per_item() -> None:
    items = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.n > 0"}],
    }
    schema = _schema({"type": "object", "properties": {"items": {"type": "array", "items": items}}})
    causes = validate_cr({"spec": {"items": [{"n": 1}, {"n": 0}]}}, schema)
    assert [c["field"] for c in causes] == ["spec.items[1]"]


def test_schema_errors_come_first_and_skip_the_rules() -> None:
    """Bad input: a string where the rule compares integers."""
    spec = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.n > 0"}],
    }
    causes = validate_cr({"spec": {"n": "x"}}, _schema(spec))
    assert [c["reason"] for c in causes] == ["FieldValueTypeInvalid"]
