"""Settings projection: each DeviceConfig section into its service's ConfigMap (pure).

Helm renders `<release>-<service>-config` with `config.yaml` from the chart values. The operator adds
one key per DeviceConfig, `<namespace>.<name>.yaml`, holding `spec.<section>.to_wire()`, and marks
each node with the DeviceConfig that owns it (`gpuop.dev/deviceconfig` annotation), so an agent
finds its node's settings. While every DeviceConfig is valid and they all agree on the section (one
DeviceConfig, or e.g. one per vendor with the same settings), `config.yaml` is set to it as well:
agents that only read `config.yaml` then get the settings too, and hot-reload them. An invalid
DeviceConfig keeps its last projected key (nothing changes until it is fixed).
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
    rendered = {text for key, text in desired.items() if text is not None}
    if valid and set(existing) == set(valid) and len(rendered) == 1:
        desired[DEFAULT_KEY] = rendered.pop()
    return {key: value for key, value in desired.items() if current.get(key) != value}
