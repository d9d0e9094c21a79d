"""Settings projection into each service's ConfigMap: per-DeviceConfig keys, config.yaml, cleanup."""

from __future__ import annotations

import json

import yaml
from gpuop_common.config import DeviceConfigSpec, MetricsExporterConfig
from gpuop_common.config.config_manager import SHIPPED_PROFILES_KEY, ConfigManagerConfig, PartitionProfile
from gpuop_operator.profilesource import NamedProfiles
from gpuop_operator.projection import (
    DEFAULT_KEY,
    NODES_KEY,
    config_map_name,
    data_key,
    plan_config_map,
    plan_config_maps,
    render_section,
)


def test_config_map_name_matches_the_chart_library() -> None:
    assert config_map_name("gpuop", "device-plugin") == "gpuop-device-plugin-config"
    assert config_map_name("my-device-plugin", "device-plugin") == "my-device-plugin-config"


def test_single_deviceconfig_fills_its_key_and_config_yaml_with_the_section() -> None:
    spec = DeviceConfigSpec.model_validate({"metricsExporter": {"port": 5001}})
    changes = plan_config_map("metrics-exporter", {DEFAULT_KEY: "{}\n"}, {"ops/gpus": spec}, ["ops/gpus"])
    assert set(changes) == {"ops.gpus.yaml", DEFAULT_KEY}
    loaded = MetricsExporterConfig.model_validate(yaml.safe_load(changes[DEFAULT_KEY] or ""))
    assert loaded.port == 5001
    assert plan_config_map("metrics-exporter", {**changes}, {"ops/gpus": spec}, ["ops/gpus"]) == {}


def test_deviceconfigs_that_agree_share_config_yaml() -> None:
    amd = DeviceConfigSpec.model_validate({"vendor": "amd", "metricsExporter": {"port": 5001}})
    nvidia = DeviceConfigSpec.model_validate({"vendor": "nvidia", "metricsExporter": {"port": 5001}})
    changes = plan_config_map(
        "metrics-exporter", {}, {"ops/amd": amd, "ops/nvidia": nvidia}, ["ops/amd", "ops/nvidia"]
    )
    assert yaml.safe_load(changes[DEFAULT_KEY] or "")["port"] == 5001
    # One of them invalid: config.yaml is left as it is.
    assert DEFAULT_KEY not in plan_config_map(
        "metrics-exporter", {}, {"ops/amd": amd}, ["ops/amd", "ops/nvidia"]
    )


def test_two_deviceconfigs_that_differ_leave_config_yaml_to_helm_and_deleted_keys_go() -> None:
    a, b = DeviceConfigSpec(), DeviceConfigSpec.model_validate({"nodeLabeller": {"enable": False}})
    current = {DEFAULT_KEY: "x", data_key("ops/gone"): "y"}
    changes = plan_config_map("node-labeller", current, {"ops/a": a, "ops/b": b}, ["ops/a", "ops/b"])
    assert DEFAULT_KEY not in changes
    assert changes[data_key("ops/gone")] is None
    assert yaml.safe_load(changes["ops.b.yaml"] or "")["enable"] is False


def test_invalid_deviceconfig_keeps_its_last_key() -> None:
    current = {data_key("ops/bad"): "old"}
    assert plan_config_map("node-labeller", current, {}, ["ops/bad"]) == {}


def test_the_node_map_names_each_held_node_s_key_and_goes_when_no_node_is_held() -> None:
    amd = DeviceConfigSpec.model_validate({"vendor": "amd", "testRunner": {"enable": True}})
    nvidia = DeviceConfigSpec.model_validate({"vendor": "nvidia"})
    valid = {"ops/amd": amd, "ops/nvidia": nvidia}
    holders = {"amd-0": "ops/amd", "nvidia-0": "ops/nvidia", "old-0": "ops/deleted"}
    changes = plan_config_map("test-runner", {}, valid, ["ops/amd", "ops/nvidia"], holders)
    expected = {"amd-0": "ops.amd.yaml", "nvidia-0": "ops.nvidia.yaml"}  # a deleted owner is left out
    assert json.loads(changes[NODES_KEY] or "") == expected  # JSON: agents parse it fast
    assert DEFAULT_KEY not in changes  # the sections differ: each node reads its own key
    agreeing = plan_config_map("node-labeller", {}, valid, ["ops/amd", "ops/nvidia"], holders)
    assert DEFAULT_KEY in agreeing  # the node map is no section: agreeing ones still fill config.yaml
    current = {k: v for k, v in changes.items() if v is not None}
    assert plan_config_map("test-runner", current, valid, ["ops/amd", "ops/nvidia"], holders) == {}
    released = plan_config_map("test-runner", current, valid, ["ops/amd", "ops/nvidia"], {})
    assert released == {NODES_KEY: None}
    assert plan_config_map("test-runner", {}, valid, ["ops/amd", "ops/nvidia"], {}).get(NODES_KEY, "-") == "-"


def test_every_service_planned_at_once_is_each_planned_alone() -> None:
    amd = DeviceConfigSpec.model_validate({"vendor": "amd", "metricsExporter": {"port": 5001}})
    nvidia = DeviceConfigSpec.model_validate({"vendor": "nvidia", "devicePlugin": {"enable": False}})
    valid = {"ops/amd": amd, "ops/nvidia": nvidia}
    existing = ["ops/amd", "ops/nvidia", "ops/bad"]
    holders = {f"node-{i}": ("ops/amd" if i % 2 else "ops/nvidia") for i in range(50)}
    currents = {
        "metrics-exporter": {DEFAULT_KEY: "{}\n", "ops.gone.yaml": "x: 1\n"},
        "device-plugin": {},
        "node-labeller": {NODES_KEY: "{}\n"},
    }
    planned = plan_config_maps(currents, valid, existing, holders)
    assert planned == {
        service: plan_config_map(service, data, valid, existing, holders)
        for service, data in currents.items()
    }
    assert planned["metrics-exporter"]["ops.gone.yaml"] is None  # cleanup still planned
    assert json.loads(planned["device-plugin"][NODES_KEY] or "")["node-1"] == "ops.amd.yaml"


def test_a_section_renders_the_same_yaml_however_often() -> None:
    spec = DeviceConfigSpec.model_validate({"metricsExporter": {"port": 5001}})
    direct = yaml.safe_dump(spec.section("metrics-exporter").to_wire(), sort_keys=True)
    assert render_section(spec, "metrics-exporter") == direct
    assert render_section(spec, "metrics-exporter") == direct  # from the cache
    other = DeviceConfigSpec.model_validate({"metricsExporter": {"port": 5002}})
    assert "5002" in render_section(other, "metrics-exporter")


SHIPPED = yaml.safe_dump(
    [
        {"name": "spx-nps1", "amd": {"computePartition": "SPX", "memoryPartition": "NPS1"}},
        {"name": "cpx-nps1", "amd": {"computePartition": "CPX", "memoryPartition": "NPS1"}},
    ]
)


def _profiles(text: str | None) -> dict[str, object]:
    config = ConfigManagerConfig.model_validate(yaml.safe_load(text or ""))
    return {p.name: p.amd.compute_partition if p.amd else None for p in config.profiles}


def test_the_chart_s_shipped_profiles_reach_the_config_manager_s_section() -> None:
    """A plain DeviceConfig (no profiles) gets every shipped profile; its own of the same name wins
    and comes first; the chart's key stays (the operator only reads it)."""
    plain = DeviceConfigSpec.model_validate({"configManager": {"enable": True}})
    current = {DEFAULT_KEY: "{}\n", SHIPPED_PROFILES_KEY: SHIPPED}
    changes = plan_config_map("config-manager", current, {"ops/amd": plain}, ["ops/amd"])
    assert SHIPPED_PROFILES_KEY not in changes
    assert _profiles(changes["ops.amd.yaml"]) == {"spx-nps1": "SPX", "cpx-nps1": "CPX"}
    assert changes[DEFAULT_KEY] == changes["ops.amd.yaml"]
    own = {"name": "cpx-nps1", "amd": {"computePartition": "DPX", "memoryPartition": "NPS2"}}
    mine = DeviceConfigSpec.model_validate({"configManager": {"enable": True, "profiles": [own]}})
    changes = plan_config_map("config-manager", current, {"ops/amd": mine}, ["ops/amd"])
    assert list(_profiles(changes["ops.amd.yaml"]).items()) == [("cpx-nps1", "DPX"), ("spx-nps1", "SPX")]
    # Other services' sections and a ConfigMap without the key are as before.
    assert (
        _profiles(plan_config_map("config-manager", {}, {"ops/amd": plain}, ["ops/amd"])["ops.amd.yaml"])
        == {}
    )


def test_unreadable_shipped_profiles_are_skipped_and_logged_naming_the_key(caplog) -> None:
    plain = DeviceConfigSpec.model_validate({"configManager": {"enable": True}})
    for bad in ("- {name: x}\n", "[unclosed\n", "- {name: Bad Name!, amd: {}}\n"):
        current = {SHIPPED_PROFILES_KEY: bad}
        changes = plan_config_map("config-manager", current, {"ops/amd": plain}, ["ops/amd"])
        assert _profiles(changes["ops.amd.yaml"]) == {}
    assert all(r.key == SHIPPED_PROFILES_KEY for r in caplog.records if "shipped profiles" in r.message)
    assert len([r for r in caplog.records if "shipped profiles" in r.message]) == 3


def test_a_profiles_config_map_comes_between_the_deviceconfig_and_the_shipped_profiles() -> None:
    own = {"name": "mine", "amd": {"computePartition": "QPX"}}
    spec = DeviceConfigSpec.model_validate(
        {"configManager": {"enable": True, "profiles": [own], "profilesConfigMap": "site"}}
    )
    site = PartitionProfile.model_validate({"name": "cpx-nps1", "amd": {"computePartition": "DPX"}})
    mine = PartitionProfile.model_validate({"name": "mine", "amd": {"computePartition": "TPX"}})
    current = {SHIPPED_PROFILES_KEY: SHIPPED}
    named = {"ops/amd": NamedProfiles((site, mine))}
    changes = plan_config_map("config-manager", current, {"ops/amd": spec}, ["ops/amd"], named=named)
    assert list(_profiles(changes["ops.amd.yaml"]).items()) == [
        ("mine", "QPX"),  # the DeviceConfig's own
        ("cpx-nps1", "DPX"),  # the ConfigMap's, over the shipped one of that name
        ("spx-nps1", "SPX"),  # shipped
    ]
    # Unusable now: the last good key stays (config.yaml too), the other services are projected.
    current = {**current, **{k: v for k, v in changes.items() if v is not None}}
    bad = {"ops/amd": NamedProfiles(problem="spec.configManager.profilesConfigMap: ... not found")}
    changed = {**spec.model_dump(by_alias=True), "metricsExporter": {"port": 5001}}
    respec = DeviceConfigSpec.model_validate(changed)
    assert plan_config_map("config-manager", current, {"ops/amd": respec}, ["ops/amd"], named=bad) == {}
    exporter = plan_config_map("metrics-exporter", {}, {"ops/amd": respec}, ["ops/amd"], named=bad)
    assert yaml.safe_load(exporter["ops.amd.yaml"] or "")["port"] == 5001
