"""Building blocks of the resource.k8s.io/v1 rules: causes, names, selectors, opaque configs.

Each function returns a list of cause dicts (`reason`, `message`, `field`) worded as kube-apiserver
words them; the kind-level rules in draslice.py and draclaim.py combine them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from gpuop_sim.apiserver import dracel, validation
from gpuop_sim.apiserver.errors import cause

JsonObj = dict[str, Any]
Causes = list[JsonObj]

MAX_SELECTORS = 32
MAX_CONFIGS = 32
MAX_CEL_LENGTH = 10 * 1024
MAX_DRIVER_NAME = 63
MAX_POOL_NAME = 253
MAX_C_IDENTIFIER = 32
MAX_DOMAIN = 63
# Map keys longer than this are shortened in the middle of a field path (`attributes[ab...yz]`).
MAX_KEY_IN_PATH = MAX_DOMAIN + 1 + MAX_C_IDENTIFIER
MAX_OPAQUE_PARAMETERS = 10 * 1024

_C_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
C_IDENTIFIER_MSG = (
    "a valid C identifier must start with alphabetic character or '_', followed by a string of "
    "alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for "
    f"validation is '{_C_IDENTIFIER}')"
)
REQUEST_REF_MSG = (
    "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"
)


# ---------------------------------------------------------------- causes
def invalid(field: str, value: Any, msg: str) -> JsonObj:
    return cause("FieldValueInvalid", f"Invalid value: {validation.quote(value)}: {msg}", field)


def invalid_shown(field: str, shown: str, msg: str) -> JsonObj:
    """Invalid with a value already rendered (a Go struct dump)."""
    return cause("FieldValueInvalid", f"Invalid value: {shown}: {msg}", field)


def required(field: str, detail: str = "") -> JsonObj:
    return cause("FieldValueRequired", "Required value" + (f": {detail}" if detail else ""), field)


def too_many(field: str, count: int, limit: int) -> JsonObj:
    return cause("FieldValueTooMany", f"Too many: {count}: must have at most {limit} items", field)


def too_long(field: str, limit: int) -> JsonObj:
    return cause("FieldValueTooLong", f"Too long: may not be more than {limit} bytes", field)


def duplicate(field: str, value: Any) -> JsonObj:
    return cause("FieldValueDuplicate", f"Duplicate value: {validation.quote(value)}", field)


def not_supported(field: str, value: Any, supported: tuple[str, ...]) -> JsonObj:
    allowed = ", ".join(validation.quote(s) for s in supported)
    return cause(
        "FieldValueNotSupported",
        f"Unsupported value: {validation.quote(value)}: supported values: {allowed}",
        field,
    )


def forbidden(field: str, detail: str) -> JsonObj:
    return cause("FieldValueForbidden", f"Forbidden: {detail}", field)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_dict(value: Any) -> JsonObj:
    return value if isinstance(value, dict) else {}


def key_path(field: str, key: str) -> str:
    """`field[key]`, with a key longer than MAX_KEY_IN_PATH cut in the middle."""
    if len(key) > MAX_KEY_IN_PATH:
        keep = MAX_KEY_IN_PATH - 3
        key = key[: (keep + 1) // 2] + "..." + key[len(key) - keep // 2 :]
    return f"{field}[{key}]"


def check_set(
    field: str, items: list[Any], limit: int, check: Callable[[str, Any], Causes], key: Callable[[Any], Any]
) -> Causes:
    """A list with a size limit (over it: one TooMany, nothing else), each item checked, then
    every repeated key a Duplicate at its index."""
    if limit >= 0 and len(items) > limit:
        return [too_many(field, len(items), limit)]
    causes: Causes = []
    for i, item in enumerate(items):
        causes += check(f"{field}[{i}]", item)
    seen: set[Any] = set()
    for i, item in enumerate(items):
        value = key(item)
        if value in seen:
            causes.append(duplicate(f"{field}[{i}]", value))
        elif isinstance(value, (str, int)):
            seen.add(value)
    return causes


def check_list(field: str, items: list[Any], limit: int, check: Callable[[str, Any], Causes]) -> Causes:
    if limit >= 0 and len(items) > limit:
        return [too_many(field, len(items), limit)]
    causes: Causes = []
    for i, item in enumerate(items):
        causes += check(f"{field}[{i}]", item)
    return causes


# ---------------------------------------------------------------- names
def dns_label(field: str, value: Any) -> Causes:
    """Every message of the DNS-1123 label check (an empty value fails the pattern)."""
    text = value if isinstance(value, str) else ""
    causes: Causes = []
    if len(text) > 63:
        causes.append(invalid(field, text, "must be no more than 63 characters"))
    if not re.fullmatch(validation._DNS1123_LABEL, text):
        causes.append(invalid(field, text, validation.LABEL_NAME_MSG))
    return causes


def dns_subdomain(field: str, value: Any, *, shown: str | None = None) -> Causes:
    text = value if isinstance(value, str) else ""
    original = text if shown is None else shown
    causes: Causes = []
    if len(text) > 253:
        causes.append(invalid(field, original, "must be no more than 253 characters"))
    if not re.fullmatch(validation._DNS1123_SUBDOMAIN, text):
        causes.append(invalid(field, original, validation.SUBDOMAIN_MSG))
    return causes


def driver_name(field: str, driver: Any) -> Causes:
    """Like a CSI driver name: required, at most 63 characters, a DNS subdomain once lowercased."""
    text = driver if isinstance(driver, str) else ""
    causes: Causes = [required(field)] if not text else []
    if len(text) > MAX_DRIVER_NAME:
        causes.append(too_long(field, MAX_DRIVER_NAME))
    if not re.fullmatch(validation._DNS1123_SUBDOMAIN, text.lower()):
        causes.append(invalid(field, text, validation.SUBDOMAIN_MSG))
    return causes


def pool_name(field: str, name: Any) -> Causes:
    """One or more DNS subdomains separated by '/', at most 253 characters."""
    text = name if isinstance(name, str) else ""
    if not text:
        return [required(field)]
    causes: Causes = [too_long(field, MAX_POOL_NAME)] if len(text) > MAX_POOL_NAME else []
    for part in text.split("/"):
        causes += dns_subdomain(field, part)
    return causes


def class_name(field: str, name: Any) -> Causes:
    if not name:
        return [required(field)]
    return dns_subdomain(field, name)


def c_identifier(field: str, ident: str) -> Causes:
    causes: Causes = [too_long(field, MAX_C_IDENTIFIER)] if len(ident) > MAX_C_IDENTIFIER else []
    if not re.fullmatch(_C_IDENTIFIER, ident):
        causes.append(invalid(field, ident, C_IDENTIFIER_MSG))
    return causes


def qualified_name(field: str, name: str) -> Causes:
    """An attribute or capacity name: a C identifier, optionally behind `<DNS domain>/`.

    As on the real server, a name with two or more slashes is not checked further."""
    parts = name.split("/")
    if len(parts) == 1:
        return c_identifier(field, name)
    if len(parts) > 2:
        return []
    domain, ident = parts
    causes = driver_name(field, domain) if domain else [invalid(field, "", "the domain must not be empty")]
    causes += c_identifier(field, ident) if ident else [invalid(field, "", "the name must not be empty")]
    return causes


def fully_qualified_name(field: str, name: str) -> Causes:
    causes = qualified_name(field, name)
    if "/" not in name:
        causes.append(
            invalid(field, name, "a fully qualified name must be a domain and a name separated by a slash")
        )
    return causes


def label_name(field: str, key: str) -> Causes:
    return [dict(c, field=field) for c in validation.validate_label_key(key)]


def label_value(field: str, value: str) -> Causes:
    causes: Causes = []
    if len(value) > 63:
        causes.append(invalid(field, value, "must be no more than 63 characters"))
    if not re.fullmatch(validation._LABEL_VALUE, value):
        causes.append(invalid(field, value, validation.LABEL_VALUE_MSG))
    return causes


# ---------------------------------------------------------------- selectors, configs, references
def selectors(field: str, value: Any) -> Causes:
    """At most 32; each needs `cel`, whose expression (at most 10 KiB) must compile to bool."""
    return check_list(field, as_list(value), MAX_SELECTORS, _selector)


def _selector(field: str, selector: Any) -> Causes:
    cel_selector = as_dict(selector).get("cel")
    if cel_selector is None:
        return [required(f"{field}.cel")]
    path = f"{field}.cel.expression"
    expression = as_dict(cel_selector).get("expression") or ""
    if not expression:
        return [required(path)]
    if len(expression.encode()) > MAX_CEL_LENGTH:
        return [too_long(path, MAX_CEL_LENGTH)]
    problem = dracel.selector_problem(expression)
    return [invalid(path, expression, problem)] if problem else []


def device_configuration(field: str, config: Any) -> Causes:
    """`opaque` is required: a driver name and `parameters`, a JSON object of at most 10 KiB."""
    opaque = as_dict(config).get("opaque")
    if opaque is None:
        return [required(f"{field}.opaque")]
    causes = driver_name(f"{field}.opaque.driver", as_dict(opaque).get("driver"))
    params = as_dict(opaque).get("parameters")
    path = f"{field}.opaque.parameters"
    if params is None:
        causes.append(required(path))
    elif len(json.dumps(params, separators=(",", ":"))) > MAX_OPAQUE_PARAMETERS:
        causes.append(too_long(path, MAX_OPAQUE_PARAMETERS))
    elif not isinstance(params, dict):
        causes.append(invalid(path, "<value omitted>", "must be a valid JSON object"))
    return causes


RequestNames = dict[str, set[str]]


def request_ref(field: str, ref: Any, names: RequestNames) -> Causes:
    """A reference to a request (`req`) or one of its subrequests (`req/sub`)."""
    text = ref if isinstance(ref, str) else ""
    segments = text.split("/")
    if len(segments) > 2:
        return [invalid(field, text, REQUEST_REF_MSG)]
    causes: Causes = []
    for segment in segments:
        causes += dns_label(field, segment)
    main = names.get(segments[0])
    if main is None or (len(segments) == 2 and segments[1] not in main):
        causes.append(invalid(field, text, REQUEST_REF_MSG))
    return causes


def request_refs(field: str, refs: Any, names: RequestNames, limit: int) -> Causes:
    return check_set(
        field, as_list(refs), limit, lambda path, ref: request_ref(path, ref, names), lambda ref: ref
    )


# ---------------------------------------------------------------- core NodeSelector
def node_selector(field: str, selector: Any) -> Causes:
    """A core/v1 NodeSelector as the core validation checks it: at least one term; expressions
    with a label-name key and values fitting the operator; fields only `metadata.name` with
    In/NotIn and one node name."""
    terms = as_list(as_dict(selector).get("nodeSelectorTerms"))
    if not terms:
        return [required(f"{field}.nodeSelectorTerms", "must have at least one node selector term")]
    causes: Causes = []
    for i, term in enumerate(terms):
        path = f"{field}.nodeSelectorTerms[{i}]"
        for j, requirement in enumerate(as_list(as_dict(term).get("matchExpressions"))):
            causes += _expression(f"{path}.matchExpressions[{j}]", as_dict(requirement))
        for j, requirement in enumerate(as_list(as_dict(term).get("matchFields"))):
            causes += _field_requirement(f"{path}.matchFields[{j}]", as_dict(requirement))
    return causes


def _expression(field: str, requirement: JsonObj) -> Causes:
    operator, values = requirement.get("operator") or "", as_list(requirement.get("values"))
    causes: Causes = []
    if operator in ("In", "NotIn"):
        if not values:
            causes.append(required(f"{field}.values", "must be specified when `operator` is 'In' or 'NotIn'"))
    elif operator in ("Exists", "DoesNotExist"):
        if values:
            causes.append(
                forbidden(
                    f"{field}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                )
            )
    elif operator in ("Gt", "Lt"):
        if len(values) != 1:
            causes.append(
                required(f"{field}.values", "must be specified single value when `operator` is 'Lt' or 'Gt'")
            )
    else:
        causes.append(invalid(f"{field}.operator", operator, "not a valid selector operator"))
    return causes + label_name(f"{field}.key", str(requirement.get("key") or ""))


def _field_requirement(field: str, requirement: JsonObj) -> Causes:
    operator, values = requirement.get("operator") or "", as_list(requirement.get("values"))
    causes: Causes = []
    if operator in ("In", "NotIn"):
        if len(values) != 1:
            causes.append(
                required(
                    f"{field}.values",
                    "must be only one value when `operator` is 'In' or 'NotIn' for node field selector",
                )
            )
    else:
        causes.append(invalid(f"{field}.operator", operator, "not a valid selector operator"))
    key = requirement.get("key") or ""
    if key != "metadata.name":
        causes.append(invalid(f"{field}.key", key, "not a valid field selector key"))
    else:
        for i, value in enumerate(values):
            for problem in validation.validate_name(str(value), "Node", f"{field}.values[{i}]"):
                causes.append(problem)
    return causes
