"""Turn on CDI in a containerd config, so containers get the devices the device plugin names.

The device plugin answers an allocation with CDI device names and writes the specs to `/var/run/cdi`;
containerd only resolves them with `enable_cdi = true` and that directory in `cdi_spec_dirs`
(containerd 1.7 config version 2: `[plugins."io.containerd.grpc.v1.cri"]`; containerd 2.x config
version 3: `[plugins."io.containerd.cri.v1.runtime"]`). The edit is line-based, so the admin's
comments and layout survive, and the result is parsed again to prove the keys hold what we set.
"""

from __future__ import annotations

import json
import re
import tomllib
from typing import Any

DEFAULT_SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")  # containerd's own default for cdi_spec_dirs
CRI_TABLES = {2: "io.containerd.grpc.v1.cri", 3: "io.containerd.cri.v1.runtime"}
_KEY_LINE = re.compile(r"^\s*(enable_cdi|cdi_spec_dirs)\s*=")


class RuntimeConfigError(ValueError):
    """The runtime config cannot be edited safely; the message says what to do instead."""


def _header(table: str) -> re.Pattern[str]:
    name = re.escape(table)
    return re.compile(rf"^(\s*)\[\s*plugins\s*\.\s*([\"']){name}\2\s*\]\s*(#.*)?$")


def _cri_table(data: dict[str, Any], version: int) -> dict[str, Any]:
    table = data.get("plugins", {}).get(CRI_TABLES[version], {})
    return table if isinstance(table, dict) else {}


def _satisfied(table: dict[str, Any], spec_dirs: list[str]) -> bool:
    dirs = table.get("cdi_spec_dirs", list(DEFAULT_SPEC_DIRS))
    return table.get("enable_cdi") is True and isinstance(dirs, list) and all(d in dirs for d in spec_dirs)


def _parse(text: str, what: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RuntimeConfigError(f"{what} is not valid TOML: {exc}") from exc


def _drop_keys(lines: list[str]) -> list[str]:
    """The section's lines without enable_cdi / cdi_spec_dirs (a multi-line array included)."""
    kept: list[str] = []
    skipping = False
    for line in lines:
        if skipping:
            skipping = "]" not in line
            continue
        if _KEY_LINE.match(line):
            value = line.split("=", 1)[1]
            skipping = value.strip().startswith("[") and "]" not in value
            continue
        kept.append(line)
    return kept


def containerd_cdi_config(text: str, spec_dirs: list[str]) -> str | None:
    """The config with CDI on and `spec_dirs` searched, or None when it already is so."""
    if not text.strip():
        fresh = f'[plugins."{CRI_TABLES[2]}"]'
        return f"version = 2\n\n{fresh}\n  enable_cdi = true\n  cdi_spec_dirs = {json.dumps(spec_dirs)}\n"
    data = _parse(text, "the containerd config")
    version = data.get("version", 1)
    if version not in CRI_TABLES:
        raise RuntimeConfigError(
            f"containerd config version {version} is not supported (2 or 3): regenerate it with "
            "`containerd config default` or set enable_cdi by hand"
        )
    table = _cri_table(data, version)
    if _satisfied(table, spec_dirs):
        return None
    current = table.get("cdi_spec_dirs", list(DEFAULT_SPEC_DIRS))
    dirs = [*current, *(d for d in spec_dirs if d not in current)] if isinstance(current, list) else spec_dirs
    lines = text.splitlines()
    header = _header(CRI_TABLES[version])
    start = next((i for i, line in enumerate(lines) if header.match(line)), None)
    if start is None:
        body = [
            f'[plugins."{CRI_TABLES[version]}"]',
            "  enable_cdi = true",
            f"  cdi_spec_dirs = {json.dumps(dirs)}",
        ]
        new_lines = [*lines, "", *body]
    else:
        end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")), len(lines))
        match = header.match(lines[start])
        indent = (match.group(1) if match else "") + "  "
        keys = [f"{indent}enable_cdi = true", f"{indent}cdi_spec_dirs = {json.dumps(dirs)}"]
        new_lines = [*lines[: start + 1], *keys, *_drop_keys(lines[start + 1 : end]), *lines[end:]]
    result = "\n".join(new_lines) + "\n"
    try:
        edited = _cri_table(_parse(result, "the edited containerd config"), version)
    except RuntimeConfigError:
        edited = {}
    if not _satisfied(edited, spec_dirs):
        raise RuntimeConfigError(
            f'could not set enable_cdi in [plugins."{CRI_TABLES[version]}"] (the table is written in a '
            "form this edit does not handle, e.g. an inline table): set enable_cdi and cdi_spec_dirs by hand"
        )
    return result
