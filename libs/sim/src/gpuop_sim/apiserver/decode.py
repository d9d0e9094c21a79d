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


def _pairs_hook(dups: list[str], prefix_stack: list[str]) -> Any:
    def hook(pairs: list[tuple[str, Any]]) -> JsonObj:
        seen: dict[str, Any] = {}
        for key, value in pairs:
            if key in seen:
                dups.append(key)
            seen[key] = value
        return seen

    return hook


def _dup_paths(raw: Any, value: Any, path: str = "") -> list[str]:
    """Find duplicated keys with their dotted path by re-parsing each object's pairs."""
    return []


def decode_json(raw: bytes, kind: str) -> Decoded:
    dups: list[str] = []
    paths: list[str] = []

    def hook(pairs: list[tuple[str, Any]]) -> JsonObj:
        seen: JsonObj = {}
        for key, value in pairs:
            if key in seen:
                dups.append(key)
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
    if dups and isinstance(value, dict):
        paths = _locate_dups(value, set(dups))
    return Decoded(value, paths or dups)


def _go_json_error(exc: Exception) -> str:
    msg = str(exc)
    if "Expecting" in msg and ("char" in msg) and "delimiter" not in msg:
        return "unexpected end of JSON input"
    return "unexpected end of JSON input" if "Unterminated" in msg or "Expecting" in msg else msg


def _locate_dups(value: JsonObj, names: set[str], path: str = "") -> list[str]:
    """Best-effort dotted paths of duplicated keys (the last occurrence wins in `value`)."""
    out: list[str] = []
    for key, child in value.items():
        here = f"{path}.{key}" if path else key
        if key in names:
            out.append(here)
        if isinstance(child, dict):
            out += _locate_dups(child, names, here)
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
