"""Request body decoding: JSON (duplicate-key aware) or YAML, and the fieldValidation modes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpuop_sim.apiserver.errors import ApiError, bad_request, cause, invalid_options

JsonObj = dict[str, Any]
FIELD_VALIDATION = ("", "Ignore", "Strict", "Warn")


@dataclass
class Decoded:
    value: Any
    duplicates: list[str] = field(default_factory=list)


def decode_json(raw: bytes, kind: str) -> Decoded:
    """Parse JSON, noting duplicated keys by their dotted path (Strict rejects them)."""
    dup_at: list[tuple[str, JsonObj]] = []

    def hook(pairs: list[tuple[str, Any]]) -> JsonObj:
        seen: JsonObj = {}
        for key, value in pairs:
            if key in seen:
                dup_at.append((key, seen))
            seen[key] = value
        return seen

    try:
        value = json.loads(raw, object_pairs_hook=hook)
    except (ValueError, UnicodeDecodeError) as exc:
        snippet = raw[:30].decode("utf-8", "replace")
        raise bad_request(
            f"the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; "
            f"json parse error: {_go_json_error(exc)} ({snippet} ...)"
        ) from exc
    if not dup_at:
        return Decoded(value)
    paths = _paths_of_dicts(value)
    return Decoded(
        value, [f"{paths[id(parent)]}.{key}".lstrip(".") for key, parent in dup_at if id(parent) in paths]
    )


def _go_json_error(exc: Exception) -> str:
    """Go's wording for the usual truncated-body case; Python's message otherwise."""
    msg = str(exc)
    return "unexpected end of JSON input" if "Expecting" in msg or "Unterminated" in msg else msg


def _paths_of_dicts(value: Any, path: str = "") -> dict[int, str]:
    """id(dict) -> dotted path of every object inside a parsed document."""
    out: dict[int, str] = {}
    if isinstance(value, dict):
        out[id(value)] = path
        for key, child in value.items():
            out.update(_paths_of_dicts(child, f"{path}.{key}" if path else key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            out.update(_paths_of_dicts(child, f"{path}[{i}]"))
    return out


def decode_yaml(raw: bytes, kind: str) -> Decoded:
    try:
        value = yaml.safe_load(raw.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise bad_request(f"the object provided is unrecognized (must be of type {kind}): {exc}") from exc
    return Decoded(value)


def decode_body(raw: bytes, content_type: str, kind: str) -> Decoded:
    """JSON unless the client said YAML (no Content-Type means JSON, as the Python client sends)."""
    ctype = content_type.split(";", maxsplit=1)[0].strip().lower()
    if ctype in ("application/yaml", "application/apply-patch+yaml", "text/yaml"):
        stripped = raw.lstrip()
        if stripped.startswith((b"{", b"[")) and ctype != "application/yaml":
            try:
                return decode_json(raw, kind)
            except ApiError:
                pass
        return decode_yaml(raw, kind)
    return decode_json(raw, kind)


def field_validation(query: dict[str, str], options_kind: str) -> str:
    mode = query.get("fieldValidation", "")
    if mode not in FIELD_VALIDATION:
        raise invalid_options(
            options_kind,
            [
                cause(
                    "FieldValueNotSupported",
                    f'Unsupported value: "{mode}": supported values: "", "Ignore", "Strict", "Warn"',
                    "fieldValidation",
                )
            ],
        )
    return mode or "Warn"
