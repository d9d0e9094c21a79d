"""CEL `x-kubernetes-validations`: compile errors, the static cost budget, and evaluation on CRs.

What the real server does with a CRD's rules, and what this module reproduces:
- A rule that does not parse is a 422 on `...x-kubernetes-validations[i].rule`, with cel-go's
  ANTLR-style message (`mismatched input '<EOF>' expecting {...}` and the caret lines).
- Each rule's estimated cost, times the most times it can run (the product of `maxItems` /
  `maxProperties` of the lists and maps above it), must stay under 10^7; all rules together
  under 10^8. Unbounded lists and maps are sized from the 3 MiB request limit, so a rule over
  every key of an unbounded map is over budget.
- A CR that fails a rule gets the rule's `message` (or `failed rule: <rule>`) with its `reason`.

Parsing and evaluation use cel-python (celpy). The estimator is our own, after cel-go's cost
model: identifiers and field selections cost 1, function calls 1, `&&`/`||`/`?:` only their
operands, string scans 0.1 per byte, regexes 0.25 per pattern byte, and a comprehension
`range size x (condition + step)`. The type checker is not reproduced (a rule that compiles
but has the wrong result type is accepted here).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
import celpy.adapter
from celpy import celparser
from lark import Token, Tree

from gpuop_sim.apiserver.errors import cause

JsonObj = dict[str, Any]

PER_RULE_COST_LIMIT = 10_000_000
TOTAL_COST_LIMIT = 100_000_000
MAX_REQUEST_BYTES = 3 * 1024 * 1024
STRING_TRAVERSAL_FACTOR = 0.1
REGEX_LENGTH_FACTOR = 0.25
# cel-go sizes a map key it knows nothing about as a short string: one traversal unit.
MAP_KEY_SIZE = 1
_HINT = (
    "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, "
    "and strings are declared)"
)
_CONTRIBUTED = (
    "Forbidden: contributed to estimated rule cost total exceeding cost limit for entire OpenAPIv3 schema"
)
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})

# Lark terminal names -> the ANTLR token names cel-go prints, in cel-go's token order.
_ANTLR_TOKENS = (
    ("LSQB", "'['"),
    ("LBRACE", "'{'"),
    ("LPAR", "'('"),
    ("DOT", "'.'"),
    ("MINUS", "'-'"),
    ("BANG", "'!'"),
    ("BOOL_LIT", "'true', 'false'"),
    ("NULL_LIT", "'null'"),
    ("FLOAT_LIT", "NUM_FLOAT"),
    ("INT_LIT", "NUM_INT"),
    ("UINT_LIT", "NUM_UINT"),
    ("STRING_LIT", "STRING"),
    ("BYTES_LIT", "BYTES"),
    ("IDENT", "IDENTIFIER"),
)


# ---------------------------------------------------------------- compiling
@dataclass(frozen=True)
class Compiled:
    tree: Tree[Any] | None
    program: Any
    error: str = ""


@lru_cache(maxsize=512)
def compile_rule(rule: str) -> Compiled:
    """Parse once per distinct rule text; `error` is cel-go's wording when it does not parse."""
    env = celpy.Environment()
    try:
        tree = env.compile(rule)
    except celparser.CELParseError as exc:
        return Compiled(None, None, syntax_error(rule, exc))
    return Compiled(tree, env.program(tree))


def syntax_error(rule: str, exc: celparser.CELParseError) -> str:
    underlying = exc.__cause__ or exc.__context__
    token = getattr(underlying, "token", None)
    expected = set(getattr(underlying, "expected", None) or ())
    lines = rule.split("\n")
    if token is not None and token.type == "$END":
        line, column = len(lines), len(lines[-1])
        detail = f"mismatched input '<EOF>' expecting {_expecting(expected)}"
    elif token is not None:
        line, column = getattr(token, "line", 1) or 1, (getattr(token, "column", 1) or 1) - 1
        detail = f"mismatched input '{token.value}' expecting {_expecting(expected)}"
    else:
        line, column = exc.line or 1, max((exc.column or 1) - 1, 0)
        char = lines[line - 1][column : column + 1] if line <= len(lines) else ""
        detail = f"token recognition error at: '{char}'"
    source = lines[line - 1] if line <= len(lines) else ""
    return (
        f"compilation failed: ERROR: <input>:{line}:{column + 1}: Syntax error: {detail}\n"
        f" | {source}\n | {'.' * column}^"
    )


def _expecting(expected: set[str]) -> str:
    names = [antlr for lark_name, antlr in _ANTLR_TOKENS if lark_name in expected]
    if "MLSTRING_LIT" in expected and "STRING" not in names:
        names.append("STRING")
    return "{" + ", ".join(names) + "}" if names else "<EOF>"


# ---------------------------------------------------------------- sizes from the schema
def _min_size(schema: JsonObj) -> int:
    """The fewest JSON bytes a value of this schema takes (sizes unbounded lists and maps)."""
    kind = schema.get("type")
    if kind == "string":
        return 2 + int(schema.get("minLength") or 0)
    if kind == "boolean":
        return 4
    if kind in ("object", "array"):
        return 2
    return 1


def max_elements(schema: JsonObj) -> int:
    """Most entries of a list or map; most bytes of a string."""
    kind = schema.get("type")
    if kind == "array":
        if schema.get("maxItems") is not None:
            return int(schema["maxItems"])
        raw_items = schema.get("items")
        items: JsonObj = raw_items if isinstance(raw_items, dict) else {}
        return (MAX_REQUEST_BYTES - 2) // (_min_size(items) + 1)
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        if schema.get("maxProperties") is not None:
            return int(schema["maxProperties"])
        return (MAX_REQUEST_BYTES - 2) // (_min_size(schema["additionalProperties"]) + 6)
    if kind == "string":
        return int(schema["maxLength"]) if schema.get("maxLength") is not None else MAX_REQUEST_BYTES - 2
    return 1


def _element_schema(schema: JsonObj | None) -> JsonObj | None:
    if not schema:
        return None
    child = schema.get("items") if schema.get("type") == "array" else schema.get("additionalProperties")
    return child if isinstance(child, dict) else None


# ---------------------------------------------------------------- cost estimation
@dataclass(frozen=True)
class Est:
    cost: int
    size: int = 1  # string bytes / list or map entries, for the operations that scan them
    schema: JsonObj | None = None


def _is_tree(node: Any, name: str) -> bool:
    return isinstance(node, Tree) and node.data == name


def _args(node: Any) -> list[Any]:
    return [c for c in node.children if isinstance(c, Tree)] if _is_tree(node, "exprlist") else []


class _Coster:
    def __init__(self, self_schema: JsonObj) -> None:
        self.scopes: list[dict[str, Est]] = [
            {
                "self": Est(1, max_elements(self_schema), self_schema),
                "oldSelf": Est(1, max_elements(self_schema), self_schema),
            }
        ]

    def ident(self, name: str) -> Est:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return Est(1)

    def cost(self, node: Any) -> Est:
        if isinstance(node, Token):
            return Est(0, len(node.value))
        children = node.children
        data = node.data
        if data == "literal":
            token = children[0]
            size = len(_literal_text(token)) if token.type.endswith("STRING_LIT") else 1
            return Est(0, size)
        if data == "ident":
            return self.ident(children[0].value)
        if len(children) == 1 and isinstance(children[0], Tree) and not data.endswith("_lit"):
            return self.cost(children[0])
        if data == "member_dot":
            target = self.cost(children[0])
            sub = ((target.schema or {}).get("properties") or {}).get(children[1].value)
            return Est(target.cost + 1, max_elements(sub) if isinstance(sub, dict) else 1, sub)
        if data == "member_index":
            target, index = self.cost(children[0]), self.cost(children[1])
            element = _element_schema(target.schema)
            size = max_elements(element) if element else 1
            return Est(target.cost + index.cost + 1, size, element)
        if data == "member_dot_arg":
            target = self.cost(children[0])
            args = _args(children[2]) if len(children) > 2 else []
            return self.call(children[1].value, target, args)
        if data == "ident_arg":
            args = _args(children[1]) if len(children) > 1 else []
            return self.call(children[0].value, None, args)
        if data in ("conditionalor", "conditionaland"):
            left, right = self.cost(children[0]), self.cost(children[1])
            return Est(left.cost + right.cost)
        if data == "expr" and len(children) == 3:
            cond, then, other = (self.cost(c) for c in children)
            return Est(cond.cost + max(then.cost, other.cost), max(then.size, other.size))
        if data in ("relation", "addition", "multiplication") and len(children) == 2:
            operator = children[0]
            left, right = self.cost(operator.children[0]), self.cost(children[1])
            scan = 0
            if (
                operator.data in ("relation_eq", "relation_ne", "relation_in")
                or operator.data == "addition_add"
            ):
                scan = math.ceil(min(left.size, right.size) * STRING_TRAVERSAL_FACTOR)
            return Est(left.cost + right.cost + max(scan, 1), left.size + right.size)
        if data == "unary" and len(children) == 2:
            return Est(self.cost(children[1]).cost + 1)
        if data in ("list_lit", "map_lit"):
            parts = [self.cost(c) for c in children if isinstance(c, Tree)]
            return Est(sum(p.cost for p in parts) + 10, len(parts))
        parts = [self.cost(c) for c in children if isinstance(c, Tree)]
        return Est(sum(p.cost for p in parts) + 1)

    def call(self, name: str, target: Est | None, args: list[Any]) -> Est:
        if target is not None and name in _MACROS and len(args) == 2 and _is_tree_ident(args[0]):
            return self.comprehension(target, _ident_name(args[0]), args[1])
        if name == "has":
            inner = self.cost(args[0]) if args else Est(0)
            return Est(inner.cost)
        arg_costs = [self.cost(a) for a in args]
        base = (target.cost if target else 0) + sum(a.cost for a in arg_costs)
        subject = target or (arg_costs[0] if arg_costs else Est(0))
        if name == "matches" and arg_costs:
            string = math.ceil(subject.size * STRING_TRAVERSAL_FACTOR)
            regex = math.ceil(arg_costs[-1].size * REGEX_LENGTH_FACTOR)
            return Est(base + string * regex)
        if name in (
            "startsWith",
            "endsWith",
            "contains",
            "indexOf",
            "lastIndexOf",
            "lowerAscii",
            "upperAscii",
        ):
            return Est(base + math.ceil(subject.size * STRING_TRAVERSAL_FACTOR), subject.size)
        return Est(base + 1, subject.size if name in ("trim", "substring", "replace") else 1)

    def comprehension(self, target: Est, var: str, body: Any) -> Est:
        schema = target.schema or {}
        element = _element_schema(schema)
        if schema.get("type") == "array":
            bound = Est(1, max_elements(element) if element else 1, element)
        else:
            bound = Est(1, MAP_KEY_SIZE, {"type": "string"})
        self.scopes.append({var: bound})
        try:
            predicate = self.cost(body).cost
        finally:
            self.scopes.pop()
        # all/exists: condition @not_strictly_false(accumulator) (2) + step accumulator && p (1 + p);
        # exists_one/map/filter build their accumulator instead, at about the same cost. The range
        # is read once and the result once more.
        per_item = 3 + predicate
        return Est(target.cost + target.size * per_item + 1, target.size)


def _literal_text(token: Token) -> str:
    text = str(token.value)
    for prefix in ("r", "R", "b", "B"):
        if text.startswith(prefix) and len(text) > 1 and text[1] in "'\"":
            text = text[1:]
    quote = 3 if text[:3] in ('"""', "'''") else 1
    return text[quote:-quote] if len(text) >= 2 * quote else text


def _unwrap(node: Any) -> Any:
    while isinstance(node, Tree) and len(node.children) == 1 and isinstance(node.children[0], Tree):
        node = node.children[0]
    return node


def _is_tree_ident(node: Any) -> bool:
    return _is_tree(_unwrap(node), "ident")


def _ident_name(node: Any) -> str:
    return str(_unwrap(node).children[0].value)


def rule_cost(tree: Tree[Any], self_schema: JsonObj) -> int:
    return _Coster(self_schema).cost(tree).cost


# ---------------------------------------------------------------- the CRD: compile + budget
@dataclass(frozen=True)
class Located:
    schema: JsonObj
    path: str  # the CRD field path of the schema node
    cardinality: int  # how many times its rules can run in one object


def rule_nodes(schema: JsonObj, path: str, cardinality: int = 1) -> Iterator[Located]:
    """Every schema node (with its path and cardinality), parents before children."""
    yield Located(schema, path, cardinality)
    for name, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, dict):
            yield from rule_nodes(sub, f"{path}.properties[{name}]", cardinality)
    if isinstance(schema.get("items"), dict):
        yield from rule_nodes(schema["items"], f"{path}.items", cardinality * max_elements(schema))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from rule_nodes(
            schema["additionalProperties"], f"{path}.additionalProperties", cardinality * max_elements(schema)
        )


def _factor(cost: int, limit: int) -> str:
    ratio = cost / limit
    if ratio > 100:
        return "more than 100x"
    return f"{ratio:f}x" if ratio < 1.5 else f"{ratio:.1f}x"


def _go_rule_dump(rule: JsonObj) -> str:
    dumped = {
        "Rule": rule.get("rule", ""),
        "Message": rule.get("message", ""),
        "MessageExpression": rule.get("messageExpression", ""),
        "Reason": rule.get("reason"),
        "FieldPath": rule.get("fieldPath", ""),
        "OptionalOldSelf": rule.get("optionalOldSelf"),
    }
    text = json.dumps(dumped, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def crd_rule_problems(schema: JsonObj, path: str) -> list[JsonObj]:
    """Compile errors and cost-budget violations of every rule in one openAPIV3Schema."""
    causes: list[JsonObj] = []
    costs: list[tuple[int, str]] = []
    for node in rule_nodes(schema, path):
        for index, rule in enumerate(node.schema.get("x-kubernetes-validations") or []):
            field = f"{node.path}.x-kubernetes-validations[{index}].rule"
            text = rule.get("rule", "") if isinstance(rule, dict) else ""
            compiled = compile_rule(text)
            if compiled.tree is None:
                causes.append(
                    cause(
                        "FieldValueInvalid", f"Invalid value: {_go_rule_dump(rule)}: {compiled.error}", field
                    )
                )
                continue
            cost = rule_cost(compiled.tree, node.schema) * node.cardinality
            costs.append((cost, field))
            if cost > PER_RULE_COST_LIMIT:
                factor = _factor(cost, PER_RULE_COST_LIMIT)
                message = f"Forbidden: estimated rule cost exceeds budget by factor of {factor} {_HINT}"
                causes.append(cause("FieldValueForbidden", message, field))
    total = sum(cost for cost, _ in costs)
    if total > TOTAL_COST_LIMIT:
        # The server names the (up to four) most expensive rules, then the whole schema.
        for _, field in sorted(costs, key=lambda c: -c[0])[:4]:
            causes.append(cause("FieldValueForbidden", _CONTRIBUTED, field))
        message = (
            "Forbidden: x-kubernetes-validations estimated rule cost total for entire OpenAPIv3 schema "
            f"exceeds budget by factor of {_factor(total, TOTAL_COST_LIMIT)} {_HINT}"
        )
        causes.append(cause("FieldValueForbidden", message, path))
    return causes


# ---------------------------------------------------------------- the CR: evaluation
_REASON_PREFIX = {
    "FieldValueInvalid": "Invalid value: ",
    "FieldValueForbidden": "Forbidden: ",
    "FieldValueRequired": "Required value: ",
    "FieldValueDuplicate": "Duplicate value: ",
}


def _child_field(field: str, name: str) -> str:
    return f"{field}.{name}" if field else name


def cr_rule_causes(value: Any, schema: JsonObj, field: str = "") -> list[JsonObj]:
    """Evaluate every rule on the CR's value (transition rules with oldSelf are skipped)."""
    causes: list[JsonObj] = []
    if value is None:
        return causes
    for rule in schema.get("x-kubernetes-validations") or []:
        text = rule.get("rule", "") if isinstance(rule, dict) else ""
        compiled = compile_rule(text)
        if compiled.program is None or "oldSelf" in text:
            continue
        reason = rule.get("reason") or "FieldValueInvalid"
        where = field + (rule.get("fieldPath") or "")
        try:
            passed = bool(compiled.program.evaluate({"self": celpy.adapter.json_to_cel(value)}))
            detail = rule.get("message") or f"failed rule: {text}"
        except Exception as exc:  # a CEL runtime error fails the rule with its message
            passed, detail = False, str(exc.args[0] if exc.args else exc)
        if not passed:
            causes.append(cause(reason, _REASON_PREFIX.get(reason, "Invalid value: ") + detail, where))
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for name, item in value.items():
            sub = props.get(name) if name in props else (extra if isinstance(extra, dict) else None)
            if isinstance(sub, dict):
                causes += cr_rule_causes(item, sub, _child_field(field, name))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            causes += cr_rule_causes(item, schema["items"], f"{field}[{index}]")
    return causes
