"""Settings projection: each DeviceConfig section into its service's ConfigMap (pure).

Helm renders `<release>-<service>-config` with `config.yaml` from the chart values. The operator adds
one key per DeviceConfig, `<namespace>.<name>.yaml`, holding `spec.<section>.to_wire()`, and marks
each node with the DeviceConfig that owns it (`gpuop.dev/deviceconfig` annotation), so an agent
finds its node's settings. While exactly one DeviceConfig exists and is valid, `config.yaml` is also
set to its section: agents that only read `config.yaml` then get the settings too, and hot-reload
them. An invalid DeviceConfig keeps its last projected key (nothing changes until it is fixed).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import yaml
from gpuop_common.config import DeviceConfigSpec

DEFAULT_KEY = "config.yaml"


def config_map_name(release: str, service: str) -> str:
    """`<release>-<service>-config`, as gpuop-lib names it (`gpuop.configMapName`)."""
    fullname = release if service in release else f"{release}-{service}"
    return f"{fullname[:63].rstrip('-')}-config"[:63].rstrip("-")


def data_key(owner: str) -> str:
    """ConfigMap key of DeviceConfig `<namespace>/<name>`."""
    return owner.replace("/", ".") + ".yaml"


def render_section(spec: DeviceConfigSpec, service: str) -> str:
    return yaml.safe_dump(spec.section(service).to_wire(), sort_keys=True)


def plan_config_map(
    service: str,
    current: Mapping[str, str],
    valid: Mapping[str, DeviceConfigSpec],
    existing: Collection[str],
) -> dict[str, str | None]:
    """Data keys to change in `service`'s ConfigMap (None deletes); empty when it is up to date.

    `valid`: owner -> spec of every valid DeviceConfig not being deleted; `existing`: owners of
    every DeviceConfig that still exists (valid or not, not being deleted)."""
    desired: dict[str, str | None] = {
        data_key(owner): render_section(spec, service) for owner, spec in valid.items()
    }
    kept = {data_key(owner) for owner in existing}
    for key in current:
        if key != DEFAULT_KEY and key.endswith(".yaml") and key not in desired and key not in kept:
            desired[key] = None
    if len(existing) == 1 and len(valid) == 1:
        (spec,) = valid.values()
        desired[DEFAULT_KEY] = render_section(spec, service)
    return {key: value for key, value in desired.items() if current.get(key) != value}
