"""Object metadata validation with the real server's messages (names, labels, finalizers).

Pure functions returning lists of `cause` dicts; the handler wraps them in a 422 Invalid.
"""

from __future__ import annotations

import re
from typing import Any

from gpuop_sim.apiserver.errors import cause

JsonObj = dict[str, Any]

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = _DNS1123_LABEL + r"(\." + _DNS1123_LABEL + r")*"
_QUALIFIED_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    f"validation is '{_DNS1123_SUBDOMAIN}')"
)
LABEL_NAME_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    f"start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    f"validation is '{_DNS1123_LABEL}')"
)
QUALIFIED_NAME_MSG = (
    "a valid label key must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    f"validation is '{_QUALIFIED_NAME}') with an optional DNS "
    "subdomain prefix and '/' (e.g. 'example.com/MyName')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
    "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
    f"regex used for validation is '{_LABEL_VALUE}')"
)

# Kinds whose names must be DNS-1123 labels (63 chars) rather than subdomains (253).
LABEL_NAMED_KINDS = frozenset({"Namespace", "Service"})


def quote(value: Any) -> str:
    """Go's %q-ish rendering used in `Invalid value: ...` messages."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def _invalid(field: str, value: Any, msg: str) -> JsonObj:
    return cause("FieldValueInvalid", f"Invalid value: {quote(value)}: {msg}", field)


def validate_name(name: str, kind: str, field: str = "metadata.name") -> list[JsonObj]:
    if kind in LABEL_NAMED_KINDS:
        if len(name) > 63:
            return [_invalid(field, name, "must be no more than 63 characters")]
        if not re.fullmatch(_DNS1123_LABEL, name):
            return [_invalid(field, name, LABEL_NAME_MSG)]
        return []
    if len(name) > 253:
        return [_invalid(field, name, "must be no more than 253 characters")]
    if not re.fullmatch(_DNS1123_SUBDOMAIN, name):
        return [_invalid(field, name, SUBDOMAIN_MSG)]
    return []


def validate_label_key(key: str, field: str = "metadata.labels") -> list[JsonObj]:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not re.fullmatch(_DNS1123_SUBDOMAIN, prefix)):
        return [_invalid(field, key, QUALIFIED_NAME_MSG if "/" in prefix else "prefix part " + SUBDOMAIN_MSG)]
    if not name or len(name) > 63 or not re.fullmatch(_QUALIFIED_NAME, name):
        if len(name) > 63:
            return [_invalid(field, key, "name part must be no more than 63 characters")]
        return [_invalid(field, key, QUALIFIED_NAME_MSG)]
    return []


def validate_labels(labels: Any, field: str = "metadata.labels") -> list[JsonObj]:
    if labels is None:
        return []
    if not isinstance(labels, dict):
        return [_invalid(field, labels, "must be a map of strings")]
    causes: list[JsonObj] = []
    for key, value in labels.items():
        causes += validate_label_key(key, field)
        if not isinstance(value, str):
            causes.append(_invalid(field, value, "must be a string"))
        elif len(value.encode()) > 63:
            causes.append(_invalid(field, value, "must be no more than 63 bytes"))
        elif not re.fullmatch(_LABEL_VALUE, value):
            causes.append(_invalid(field, value, LABEL_VALUE_MSG))
    return causes


def validate_annotations(annotations: Any) -> list[JsonObj]:
    if annotations is None:
        return []
    if not isinstance(annotations, dict):
        return [_invalid("metadata.annotations", annotations, "must be a map of strings")]
    causes: list[JsonObj] = []
    total = 0
    for key, value in annotations.items():
        causes += validate_label_key(key, "metadata.annotations")
        total += len(key) + len(str(value))
    if total > 256 * 1024:
        causes.append(
            cause("FieldValueTooLong", "Too long: may not be more than 262144 bytes", "metadata.annotations")
        )
    return causes


def validate_metadata(obj: JsonObj, kind: str) -> list[JsonObj]:
    """Checks every create/update runs on metadata (name already resolved from generateName)."""
    meta = obj.get("metadata") or {}
    causes: list[JsonObj] = []
    name = meta.get("name") or ""
    if not name:
        causes.append(
            cause("FieldValueRequired", "Required value: name or generateName is required", "metadata.name")
        )
    else:
        causes += validate_name(name, kind)
    causes += validate_labels(meta.get("labels"))
    causes += validate_annotations(meta.get("annotations"))
    return causes


def new_finalizers(old: JsonObj, new: JsonObj) -> list[str]:
    before = set((old.get("metadata") or {}).get("finalizers") or [])
    return [f for f in (new.get("metadata") or {}).get("finalizers") or [] if f not in before]


def go_string_slice(values: list[str]) -> str:
    return "[]string{" + ", ".join(quote(v) for v in values) + "}"
