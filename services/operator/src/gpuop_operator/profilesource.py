"""Partition profiles from the ConfigMap `spec.configManager.profilesConfigMap` names (pure).

The config manager's profiles come from three places, first of a name wins: the DeviceConfig's
own `profiles`, this ConfigMap (an administrator's site-wide list, kept out of the DeviceConfig),
and the profiles the config-manager chart ships (projection.py). A ConfigMap that is missing,
lacks the key, or holds something that is not a valid list of profiles is reported naming the
field; the projection then keeps the config manager's last good settings for that DeviceConfig.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from gpuop_common.config.config_manager import NAMED_PROFILES_KEY, ConfigManagerConfig, PartitionProfile
from pydantic import TypeAdapter, ValidationError

FIELD = "spec.configManager.profilesConfigMap"
REASON = "ProfilesConfigMapInvalid"
_PROFILES = TypeAdapter(list[PartitionProfile])


@dataclass(frozen=True)
class NamedProfiles:
    profiles: tuple[PartitionProfile, ...] = ()
    problem: str = ""  # why the ConfigMap cannot be used, naming the field; "" when it can


def named_profiles(
    section: ConfigManagerConfig, namespace: str, config_map: Mapping[str, Any] | None
) -> NamedProfiles:
    """The profiles of the ConfigMap `section.profiles_config_map` names (None: not found)."""
    name = section.profiles_config_map
    if not name or not section.enable:
        return NamedProfiles()
    where = f"{FIELD}: ConfigMap {namespace}/{name}"
    if config_map is None:
        return NamedProfiles(problem=f"{where} not found")
    text = (config_map.get("data") or {}).get(NAMED_PROFILES_KEY)
    if text is None:
        return NamedProfiles(problem=f"{where} has no key {NAMED_PROFILES_KEY}")
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        return NamedProfiles(problem=f"{where} key {NAMED_PROFILES_KEY}: not YAML{at}")
    try:
        profiles = _PROFILES.validate_python(loaded if loaded is not None else [])
    except ValidationError as exc:
        first = exc.errors()[0]
        path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"])
        return NamedProfiles(problem=f"{where} key {NAMED_PROFILES_KEY}{path}: {first['msg']}")
    names = [p.name for p in profiles]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        return NamedProfiles(
            problem=f"{where} key {NAMED_PROFILES_KEY}: name {', '.join(twice)} used more than once"
        )
    return NamedProfiles(tuple(profiles))
