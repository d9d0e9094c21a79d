"""The playbook-override ConfigMap, checked before any driver Job mounts it (pure).

A driver Job runs `ansible-playbook --syntax-check` on its override, but by then the node may be
cordoned and drained, and the error reaches only that node's Event. The operator reads the
ConfigMap itself and holds the driver lifecycle with a DeviceConfig condition naming the key, so a
bad override stops the rollout before it touches a node. What can only be known by Ansible (an
unknown module, a bad keyword inside a task) is still the Job's syntax check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

OVERRIDE_SUFFIXES = (".yml", ".yaml")  # the keys playbookrun.find_override looks for
PLAY_KEYS = ("hosts", "import_playbook", "ansible.builtin.import_playbook")
REASON = "PlaybookOverrideInvalid"


def override_problems(name: str, config_map: Mapping[str, Any] | None) -> list[str]:
    """Why the override ConfigMap `name` (None: not found) cannot be used; empty when it can."""
    where = f"ConfigMap {name} (--driver-playbook-overrides)"
    if config_map is None:
        return [f"{where} not found; create it or unset driverJobs.playbookOverrides"]
    data = config_map.get("data") or {}
    problems: list[str] = []
    playbooks: dict[str, str] = {}
    for key in sorted(data):
        stem, dot, suffix = key.rpartition(".")
        if not dot or f".{suffix}" not in OVERRIDE_SUFFIXES:
            continue  # not a playbook key: never mounted as one
        if stem in playbooks:
            problems.append(f"{where}: both {playbooks[stem]} and {key} override {stem}; keep one")
            continue
        playbooks[stem] = key
        problems.extend(f"{where} key {key}: {p}" for p in _playbook_problems(str(data[key])))
    for key in sorted(config_map.get("binaryData") or {}):
        if key.endswith(OVERRIDE_SUFFIXES):
            problems.append(f"{where} key {key}: a playbook must be in data, not binaryData")
    return problems


def _playbook_problems(text: str) -> list[str]:
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return [f"not valid YAML{at}: {problem}"]
    if not isinstance(document, list) or not document:
        return ["a playbook is a non-empty YAML list of plays"]
    problems = []
    for index, play in enumerate(document):
        if not isinstance(play, dict):
            problems.append(f"play {index}: a play is a mapping, got {type(play).__name__}")
        elif not any(k in play for k in PLAY_KEYS):
            problems.append(f"play {index}: needs `hosts` (or `import_playbook`)")
    return problems
