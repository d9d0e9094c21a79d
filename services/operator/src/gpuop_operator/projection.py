"""Settings projection: each DeviceConfig section into its service's ConfigMap (pure).

Helm renders `<release>-<service>-config` with `config.yaml` from the chart values. The operator adds
one key per DeviceConfig, `<namespace>.<name>.yaml`, holding `spec.<section>.to_wire()`, and marks
each node with the DeviceConfig that owns it (`gpuop.dev/deviceconfig` annotation), so an agent
finds its node's settings: `nodes.yaml` maps each node to the key of its DeviceConfig, and every
agent's config watcher (gpuop_common.configfile) reads its node's key through it, so two
DeviceConfigs (one per vendor, say) can carry different settings. While every DeviceConfig is valid
and they all agree on the section (one DeviceConfig, or e.g. one per vendor with the same settings),
`config.yaml` is set to it as well: an agent on a node no DeviceConfig holds yet, or one started
standalone, reads that. An invalid DeviceConfig keeps its last projected key (nothing changes until
it is fixed).

The config manager's section also gets the chart's shipped profiles (`shipped-profiles.yaml` in
its ConfigMap, which helm renders and the operator only reads): those the DeviceConfig does not
name are added after its own, so `gpuop.dev/gpu-config-profile=cpx-nps1` works after a plain
install. Before them come the profiles of the ConfigMap `configManager.profilesConfigMap` names
(profilesource.py), and before those the DeviceConfig's own: the first of a name wins.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Collection, Mapping

import yaml
from gpuop_common.config import DeviceConfigSpec
from gpuop_common.config.config_manager import (
    SHIPPED_PROFILES_KEY,
    ConfigManagerConfig,
    PartitionProfile,
    with_profiles_added,
)
from pydantic import TypeAdapter, ValidationError

from gpuop_operator.profilesource import NamedProfiles

log = logging.getLogger(__name__)

DEFAULT_KEY = "config.yaml"
NODES_KEY = "nodes.yaml"  # node name -> data key of the DeviceConfig holding the node


def config_map_name(release: str, service: str) -> str:
    """`<release>-<service>-config`, as gpuop-lib names it (`gpuop.configMapName`)."""
    fullname = release if service in release else f"{release}-{service}"
    return f"{fullname[:63].rstrip('-')}-config"[:63].rstrip("-")


def data_key(owner: str) -> str:
    """ConfigMap key of DeviceConfig `<namespace>/<name>`."""
    return owner.replace("/", ".") + ".yaml"


def render_section(spec: DeviceConfigSpec, service: str, more: tuple[PartitionProfile, ...] = ()) -> str:
    # Every pass renders every section; the YAML of a section that did not change is remembered
    # (PyYAML took a tenth of a pass; the JSON key costs a few microseconds).
    section = spec.section(service)
    if more and isinstance(section, ConfigManagerConfig):
        section = with_profiles_added(section, more)  # the section's own profiles win by name
    return _yaml_of(json.dumps(section.to_wire(), sort_keys=True))


_PROFILES = TypeAdapter(list[PartitionProfile])


@functools.lru_cache(maxsize=16)
def shipped_profiles(text: str | None) -> tuple[PartitionProfile, ...]:
    """The chart's profiles from `shipped-profiles.yaml` (none when absent). The chart's schema
    checks them at install; one that is unreadable anyway is logged, naming the key, and skipped."""
    if not text:
        return ()
    try:
        return tuple(_PROFILES.validate_python(yaml.safe_load(text) or []))
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        log.warning(
            "ignoring the chart's shipped profiles",
            extra={"key": SHIPPED_PROFILES_KEY, "error": first},
        )
        return ()


@functools.lru_cache(maxsize=256)
def _yaml_of(wire_json: str) -> str:
    return yaml.safe_dump(json.loads(wire_json), sort_keys=True)


def render_nodes(holders: Mapping[str, str], existing: Collection[str]) -> str | None:
    """`nodes.yaml`: node -> data key, for the nodes held by a DeviceConfig that still exists; None
    when there is none (the key is then deleted)."""
    alive = set(existing)
    mapping = {node: data_key(owner) for node, owner in sorted(holders.items()) if owner in alive}
    # JSON (also YAML): agents parse it on every change, and json is fast where PyYAML is not.
    return json.dumps(mapping, indent=0, sort_keys=True) + "\n" if mapping else None


def plan_config_map(
    service: str,
    current: Mapping[str, str],
    valid: Mapping[str, DeviceConfigSpec],
    existing: Collection[str],
    holders: Mapping[str, str] | None = None,
    *,
    named: Mapping[str, NamedProfiles] | None = None,
) -> dict[str, str | None]:
    """Data keys to change in `service`'s ConfigMap (None deletes); empty when it is up to date.

    `valid`: owner -> spec of every valid DeviceConfig not being deleted; `existing`: owners of
    every DeviceConfig that still exists (valid or not, not being deleted); `holders`: node ->
    owner, from the nodes' `gpuop.dev/deviceconfig` annotations; `named`: owner -> the profiles of
    its `configManager.profilesConfigMap` (one with a problem keeps its last config-manager key)."""
    nodes_text = render_nodes(holders or {}, existing)
    return _changes(service, current, valid, existing, nodes_text, named=named or {})


def plan_config_maps(
    currents: Mapping[str, Mapping[str, str]],
    valid: Mapping[str, DeviceConfigSpec],
    existing: Collection[str],
    holders: Mapping[str, str],
    *,
    named: Mapping[str, NamedProfiles] | None = None,
) -> dict[str, dict[str, str | None]]:
    """`plan_config_map` for each service (service -> its ConfigMap's data), `nodes.yaml` rendered
    once for all of them (a 1,000-node map is the costly part of a pass's projection)."""
    nodes_text = render_nodes(holders, existing)
    return {
        service: _changes(service, data, valid, existing, nodes_text, named=named or {})
        for service, data in currents.items()
    }


def _changes(
    service: str,
    current: Mapping[str, str],
    valid: Mapping[str, DeviceConfigSpec],
    existing: Collection[str],
    nodes_text: str | None,
    *,
    named: Mapping[str, NamedProfiles],
) -> dict[str, str | None]:
    more: dict[str, tuple[PartitionProfile, ...]] = {}
    if service == "config-manager":
        # Like an invalid DeviceConfig, one whose profiles ConfigMap is unusable keeps its key.
        valid = {o: spec for o, spec in valid.items() if not (o in named and named[o].problem)}
        shipped = shipped_profiles(current.get(SHIPPED_PROFILES_KEY))
        more = {o: (*(named[o].profiles if o in named else ()), *shipped) for o in valid}
    desired: dict[str, str | None] = {
        data_key(owner): render_section(spec, service, more.get(owner, ())) for owner, spec in valid.items()
    }
    desired[NODES_KEY] = nodes_text
    kept = {data_key(owner) for owner in existing}
    for key in current:
        owned = key.endswith(".yaml") and key not in (DEFAULT_KEY, NODES_KEY, SHIPPED_PROFILES_KEY)
        if owned and key not in desired and key not in kept:
            desired[key] = None
    rendered = {text for key, text in desired.items() if text is not None and key != NODES_KEY}
    if valid and set(existing) == set(valid) and len(rendered) == 1:
        desired[DEFAULT_KEY] = rendered.pop()
    return {
        key: value
        for key, value in desired.items()
        if current.get(key) != value and not (value is None and key not in current)
    }
