"""Kubernetes label syntax: turning free text (product names, driver versions) into valid keys/values.

A label value is at most 63 characters, empty or starting and ending with an alphanumeric, with
`-`, `_` and `.` allowed in between. The key's name part (after `prefix/`) follows the same rules but
may not be empty. Both anchors sanitise product names by dropping what is not allowed and replacing
spaces (GFD with `-`, the AMD labeller with `_`); we do the same and then enforce the length rule.
"""

from __future__ import annotations

import re

MAX_NAME = 63
_INVALID = re.compile(r"[^A-Za-z0-9._\- ]")
_VALUE = re.compile(r"^(|[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)$")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)


def is_valid_key(key: str) -> bool:
    prefix, _, _ = key.rpartition("/")
    return len(prefix) <= 253 and bool(_KEY.match(key))


def is_valid_value(value: str) -> bool:
    return bool(_VALUE.match(value))


def sanitise(text: str, space: str = "-", limit: int = MAX_NAME) -> str:
    """Drop characters a label cannot hold, replace spaces, cut to `limit` and trim the ends.

    `AMD Instinct MI300X (OAM)` -> `AMD_Instinct_MI300X_OAM` with space="_"; the result may be empty
    when nothing usable is left (the caller then leaves the label out).
    """
    cleaned = _INVALID.sub("", text.strip()).replace(" ", space)
    # Collapse runs of the separator that removed characters left behind (`A ( B` -> `A_B`).
    if space:
        cleaned = re.sub(re.escape(space) + "{2,}", space, cleaned)
    return _EDGE.sub("", _EDGE.sub("", cleaned)[:limit])


def value_or_none(text: str | None, space: str = "-") -> str | None:
    """A label value for `text`: unchanged when already valid, else sanitised; None when unusable."""
    if text is None:
        return None
    text = text.strip()
    if is_valid_value(text):
        return text
    cleaned = sanitise(text, space)
    return cleaned or None


def key_with_suffix(prefix: str, name: str, suffix: str) -> str | None:
    """`<prefix>/<name>.<suffix>` with the suffix cut so the name part fits 63 characters.

    Counter labels (`amd.com/gpu.product-name.<value>=<count>`) embed a value in the key; a long
    product name must not make the key invalid, so its tail is cut (and re-trimmed to alphanumerics).
    """
    room = MAX_NAME - len(name) - 1
    if room <= 0:
        return None
    part = _EDGE.sub("", sanitise(suffix, "_")[:room])
    return f"{prefix}/{name}.{part}" if part else None
