"""CEL device selectors of resource.k8s.io (DeviceClass and ResourceClaim requests): compile checks.

The real server compiles each `selectors[i].cel.expression` against the DRA environment (one
variable, `device`, with `driver` string, `attributes` map(string, map(string, dyn)), `capacity`
map(string, map(string, kubernetes.Quantity)), `allowMultipleAllocations` bool) and rejects:
- an expression that does not parse (cel-go's syntax error with caret lines; see cel.py);
- a reference to an undeclared identifier, or to a field `device` does not have;
- an operator applied to types it has no overload for (`device.driver == 1`: "found no matching
  overload for '_==_' applied to '(string, int)'", at the operator; ordering compares numbers
  across int, uint and double, as the Kubernetes environment allows);
- a result type that is neither bool nor the attribute value type (`google.protobuf.Any`):
  "must evaluate to bool or the unknown type, not T".

The type inference here is partial: wherever a type is not known for certain (calls of
extension functions, arithmetic on mixed types), it is `dyn` and accepted, so an expression is
only refused when its result type is certain. Library namespaces (`cel.bind`, `sets.*`, ...)
are understood; the selector cost limit is not estimated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lark import Token, Tree

from gpuop_sim.apiserver import cel

DYN = "dyn"
# An attribute's value type; a result of this type is accepted as "the unknown type".
ANY = "google.protobuf.Any"
QUANTITY = "kubernetes.Quantity"
DEVICE = "kubernetes.DRADevice"
DEVICE_FIELDS = {
    "driver": "string",
    "attributes": f"map(string, map(string, {ANY}))",
    "capacity": f"map(string, map(string, {QUANTITY}))",
    "allowMultipleAllocations": "bool",
}
# Namespaces of the Kubernetes CEL libraries, called like methods of an identifier.
_NAMESPACES = frozenset({"cel", "math", "strings", "sets", "base64", "optional", "lists"})
ACCEPTED = frozenset({"bool", ANY, DYN})
_LITERALS = {
    "INT_LIT": "int",
    "UINT_LIT": "uint",
    "FLOAT_LIT": "double",
    "STRING_LIT": "string",
    "MLSTRING_LIT": "string",
    "BYTES_LIT": "bytes",
    "BOOL_LIT": "bool",
    "NULL_LIT": "null_type",
}
_BOOL_METHODS = frozenset(
    {
        "startsWith",
        "endsWith",
        "contains",
        "matches",
        "isGreaterThan",
        "isLessThan",
        "isInteger",
        "all",
        "exists",
        "exists_one",
    }
)
_INT_METHODS = frozenset({"size", "compareTo", "asInteger", "sign", "indexOf", "lastIndexOf"})
_STRING_METHODS = frozenset({"lowerAscii", "upperAscii", "trim", "replace", "substring", "join"})
_GLOBAL_RESULTS = {
    "size": "int",
    "int": "int",
    "uint": "uint",
    "double": "double",
    "string": "string",
    "bytes": "bytes",
    "bool": "bool",
    "has": "bool",
    "matches": "bool",
    "isQuantity": "bool",
    "isSemver": "bool",
    "quantity": QUANTITY,
}


class CelCheckError(Exception):
    def __init__(self, message: str, line: int, column: int) -> None:
        super().__init__(message)
        self.message, self.line, self.column = message, line, column


@dataclass
class _Scope:
    names: dict[str, str]


def _map_value(typ: str) -> str | None:
    """The value type of `map(K, V)` (None if typ is not a map)."""
    if not typ.startswith("map(") or not typ.endswith(")"):
        return None
    inner, depth = typ[4:-1], 0
    for i, ch in enumerate(inner):
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            return inner[i + 1 :].strip()
    return None


def _list_elem(typ: str) -> str | None:
    return typ[5:-1] if typ.startswith("list(") and typ.endswith(")") else None


# Operators by grammar rule, as cel-go names their overloads.
_OPERATORS = {
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "addition_add": "_+_",
    "addition_sub": "_-_",
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
    "conditionaland": "_&&_",
    "conditionalor": "_||_",
    "unary_not": "!_",
    "unary_neg": "-_",
}
# Types whose operator overloads are certain; anything else (dyn, any, lists, maps, null) is let through.
_CONCRETE = frozenset({"bool", "int", "uint", "double", "string", "bytes", QUANTITY, DEVICE})
_NUMERIC = frozenset({"int", "uint", "double"})
_ORDERED = frozenset({"bool", "int", "uint", "double", "string", "bytes"})


def overload_exists(operator: str, args: tuple[str, ...]) -> bool:
    """Whether the Kubernetes CEL environment has an overload of `operator` for these argument
    types (only asked when every type is concrete). Ordering compares numbers across types."""
    if operator in ("_&&_", "_||_", "!_"):
        return all(a == "bool" for a in args)
    if operator == "-_":
        return args[0] in ("int", "double")
    left, right = args
    if operator in ("_==_", "_!=_"):
        return left == right
    if operator in ("_<_", "_<=_", "_>_", "_>=_"):
        return (left == right and left in _ORDERED) or (left in _NUMERIC and right in _NUMERIC)
    if operator == "_+_":
        return left == right and left in {"int", "uint", "double", "string", "bytes"}
    if operator == "_%_":
        return left == right and left in {"int", "uint"}
    return left == right and left in _NUMERIC


class _Checker:
    def __init__(self, source: str = "") -> None:
        self.scopes: list[dict[str, str]] = [{"device": DEVICE}]
        self.source = source

    def _position(self, offset: int) -> tuple[int, int]:
        before = self.source[:offset]
        return before.count("\n") + 1, offset - (before.rfind("\n") + 1)

    def _operator_at(self, after: Any) -> int:
        """The offset of the operator that follows the subtree `after`."""
        offset = getattr(getattr(after, "meta", None), "end_pos", 0) or 0
        while offset < len(self.source) and self.source[offset].isspace():
            offset += 1
        return offset

    def check_overload(self, operator: str, args: tuple[str, ...], offset: int) -> None:
        if not all(a in _CONCRETE for a in args) or overload_exists(operator, args):
            return
        line, column = self._position(offset)
        shown = ", ".join(args)
        raise CelCheckError(
            f"found no matching overload for '{operator}' applied to '({shown})'", line, column
        )

    def lookup(self, token: Token) -> str:
        name = str(token.value)
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        raise CelCheckError(
            f"undeclared reference to '{name}' (in container '')", token.line or 1, (token.column or 1) - 1
        )

    def typ(self, node: Any) -> str:
        if isinstance(node, Token):
            return DYN
        data, children = node.data, node.children
        if data == "literal":
            return _LITERALS.get(children[0].type, DYN)
        if data == "ident":
            return self.lookup(children[0])
        if data == "paren_expr" or (
            len(children) == 1 and isinstance(children[0], Tree) and not data.endswith("_lit")
        ):
            return self.typ(children[0])
        if data == "expr" and len(children) == 3:
            self.typ(children[0])
            then, other = self.typ(children[1]), self.typ(children[2])
            return then if then == other else DYN
        if data in ("conditionalor", "conditionaland") and len(children) == 2:
            left, right = self.typ(children[0]), self.typ(children[1])
            self.check_overload(_OPERATORS[data], (left, right), self._operator_at(children[0]))
            return "bool"
        if data == "relation" and len(children) == 2:
            operand = children[0].children[0]
            left, right = self.typ(operand), self.typ(children[1])
            if children[0].data in _OPERATORS:
                self.check_overload(_OPERATORS[children[0].data], (left, right), self._operator_at(operand))
            return "bool"
        if data in ("addition", "multiplication") and len(children) == 2:
            operand = children[0].children[0]
            left, right = self.typ(operand), self.typ(children[1])
            if children[0].data in _OPERATORS:
                self.check_overload(_OPERATORS[children[0].data], (left, right), self._operator_at(operand))
            return left if left == right and left != "null_type" else DYN
        if data == "unary" and len(children) == 2:
            operand = self.typ(children[1])
            start = getattr(node.meta, "start_pos", 0) or 0
            self.check_overload(_OPERATORS.get(children[0].data, "!_"), (operand,), start)
            return "bool" if children[0].data == "unary_not" else operand
        if data == "member_dot":
            return self.select(children[0], children[1])
        if data == "member_index":
            target = self.typ(children[0])
            self.typ(children[1])
            return _map_value(target) or _list_elem(target) or DYN
        if data == "member_dot_arg":
            return self.method(children)
        if data == "ident_arg":
            args = cel._args(children[1]) if len(children) > 1 else []
            for arg in args:
                self.typ(arg)
            return _GLOBAL_RESULTS.get(str(children[0].value), DYN)
        if data == "list_lit":
            items = [self.typ(c) for c in cel._args(children[0])] if children else []
            return f"list({items[0]})" if items and all(t == items[0] for t in items) else "list(dyn)"
        if data == "map_lit":
            parts = [self.typ(c) for c in children[0].children if isinstance(c, Tree)] if children else []
            keys, values = parts[0::2], parts[1::2]
            key = keys[0] if keys and all(k == keys[0] for k in keys) else DYN
            value = values[0] if values and all(v == values[0] for v in values) else DYN
            return f"map({key}, {value})"
        for child in children:
            if isinstance(child, Tree):
                self.typ(child)
        return DYN

    def select(self, target_node: Any, field: Token) -> str:
        target = self.typ(target_node)
        name = str(field.value)
        if target == DEVICE:
            if name not in DEVICE_FIELDS:
                raise CelCheckError(f"undefined field '{name}'", field.line or 1, (field.column or 2) - 2)
            return DEVICE_FIELDS[name]
        return _map_value(target) or DYN

    def _namespace(self, node: Any) -> str | None:
        """`cel` in `cel.bind(...)`: a library namespace, unless a variable shadows it."""
        if not cel._is_tree_ident(node):
            return None
        name = cel._ident_name(node)
        shadowed = any(name in scope for scope in self.scopes)
        return name if name in _NAMESPACES and not shadowed else None

    def method(self, children: list[Any]) -> str:
        name = str(children[1].value)
        args = cel._args(children[2]) if len(children) > 2 else []
        namespace = self._namespace(children[0])
        if namespace == "cel" and name == "bind" and len(args) == 3 and cel._is_tree_ident(args[0]):
            bound = self.typ(args[1])
            self.scopes.append({cel._ident_name(args[0]): bound})
            try:
                return self.typ(args[2])
            finally:
                self.scopes.pop()
        if namespace is not None:
            for arg in args:
                self.typ(arg)
            return "bool" if namespace == "sets" else DYN
        target = self.typ(children[0])
        if (
            name in ("all", "exists", "exists_one", "map", "filter")
            and len(args) == 2
            and cel._is_tree_ident(args[0])
        ):
            element = _list_elem(target) or (target[4:].split(",", 1)[0] if _map_value(target) else DYN)
            self.scopes.append({cel._ident_name(args[0]): element})
            try:
                body = self.typ(args[1])
            finally:
                self.scopes.pop()
            if name == "map":
                return f"list({body})"
            return target if name == "filter" else "bool"
        for arg in args:
            self.typ(arg)
        if name in _BOOL_METHODS:
            return "bool"
        if name in _INT_METHODS:
            return "int"
        if name in _STRING_METHODS:
            return "string"
        if name in ("add", "sub") and target == QUANTITY:
            return QUANTITY
        if name == "asApproximateFloat":
            return "double"
        return DYN


def _caret(expression: str, line: int, column: int, message: str) -> str:
    lines = expression.split("\n")
    source = lines[line - 1] if 0 < line <= len(lines) else ""
    return (
        f"compilation failed: ERROR: <input>:{line}:{column + 1}: {message}\n | {source}\n | {'.' * column}^"
    )


def selector_problem(expression: str) -> str | None:
    """Why the server refuses this selector expression (its message after the value), or None."""
    compiled = cel.compile_rule(expression)
    if compiled.error:
        return compiled.error
    assert compiled.tree is not None
    try:
        result = _Checker(expression).typ(compiled.tree)
    except CelCheckError as exc:
        return _caret(expression, exc.line, exc.column, exc.message)
    if result not in ACCEPTED:
        return f"must evaluate to bool or the unknown type, not {result}"
    return None
