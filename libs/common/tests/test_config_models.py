"""Config models: valid examples, each constraint violated names its field, cross-field rules."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from gpuop_common.config import (
    OPERAND_SECTIONS,
    DeviceConfigSpec,
    DevicePluginConfig,
    DriverUpgradePolicy,
    MetricsExporterConfig,
    PartitionProfile,
)
from pydantic import ValidationError

AMD_SPEC: dict[str, Any] = {
    "selector": {"matchLabels": {"feature.node.kubernetes.io/amd-gpu": "true"}},
    "vendor": "amd",
    "driver": {
        "enable": True,
        "version": "6.4.1",
        "blacklist": True,
        "image": "registry.example.com:5000/gpuop/amdgpu_kmod",
        "amdgpuInstallerRepoURL": "https://repo.radeon.com",
        "kernelModuleParameters": ["ras_enable=1"],
        "upgradePolicy": {
            "maxParallelUpgrades": 3,
            "maxUnavailableNodes": "50%",
            "nodeDrainPolicy": {"force": True, "timeoutSeconds": 600, "ignoreNamespaces": ["kube-system"]},
            "rebootRequired": False,
        },
    },
    "devicePlugin": {
        "resourceNamingStrategy": "mixed",
        "image": "docker.io/rocm/k8s-device-plugin:1.31.0",
        "health": {"pollIntervalSeconds": 60, "rasUncorrectableThreshold": 2},
        "resourceFilter": {"pciAddresses": ["0000:03:00.0"], "models": ["MI300X"]},
    },
    "nodeLabeller": {"labelSets": ["amd", "neutral"], "intervalSeconds": 120},
    "metricsExporter": {
        "port": 5001,
        "namingSets": ["amd"],
        "fieldsDeny": ["gpu_prof_sm_active"],
        "extraLabels": {"cluster_name": "lab"},
        "healthThresholds": [{"metric": "gpu_ecc_uncorrect_total", "max": 0}],
        "serviceMonitor": {"enable": True, "interval": "15s", "labels": {"release": "prometheus"}},
    },
    "testRunner": {"enable": True, "framework": "AGFHC", "recipe": "all_lvl1", "iterations": 2},
    "configManager": {
        "enable": True,
        "profiles": [
            {
                "name": "cpx-nps4",
                "nodeSelector": {"gpuop.dev/partition": "cpx"},
                "amd": {"computePartition": "CPX", "memoryPartition": "NPS4", "skippedGpus": [7]},
            }
        ],
    },
    "remediation": {
        "enable": True,
        "taint": {"key": "amd-gpu-unhealthy", "effect": "NoExecute"},
        "maxParallel": 2,
        "rateLimit": {"maxRunsPerWindow": 2, "windowSeconds": 3600},
    },
}

NVIDIA_SPEC: dict[str, Any] = {
    "selector": {
        "matchExpressions": [{"key": "nvidia.com/gpu.present", "operator": "In", "values": ["true"]}]
    },
    "vendor": "nvidia",
    "driver": {"enable": True, "kernelModuleType": "open", "version": "595.91.07"},
    "devicePlugin": {
        "migStrategy": "mixed",
        "cdi": True,
        "sharing": {
            "timeSlicing": {
                "renameByDefault": True,
                "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
            }
        },
        "health": {"ignoredXids": [13, 31, 43, 45, 68, 109, 94]},
    },
    "metricsExporter": {"namingSets": ["dcgm", "neutral"], "fieldsAllow": ["DCGM_FI_DEV_GPU_TEMP"]},
    "configManager": {
        "enable": True,
        "profiles": [
            {
                "name": "all-1g.10gb",
                "nvidia": [{"migEnabled": True, "migDevices": {"1g.10gb": 7}}],
            }
        ],
    },
}


def _errors(model: type[Any], data: Any) -> list[str]:
    with pytest.raises(ValidationError) as raised:
        model.model_validate(data)
    return [".".join(str(part) for part in e["loc"]) + ": " + e["msg"] for e in raised.value.errors()]


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    result = copy.deepcopy(data)
    node = result
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    return result


@pytest.mark.parametrize("example", [AMD_SPEC, NVIDIA_SPEC], ids=["amd", "nvidia"])
def test_valid_examples_round_trip(example: dict[str, Any]) -> None:
    spec = DeviceConfigSpec.model_validate(example)
    assert DeviceConfigSpec.model_validate(spec.to_wire()) == spec


def test_defaults_are_safe() -> None:
    spec = DeviceConfigSpec()
    assert spec.vendor == "auto"
    assert spec.driver.enable is False  # never replaces a node's driver unless asked
    assert spec.remediation.enable is False  # never reboots nodes unless asked
    assert spec.config_manager.enable is False  # never repartitions GPUs unless asked
    assert spec.driver.upgrade_policy.max_parallel_upgrades == 1
    assert spec.metrics_exporter.port == 5000
    assert spec.device_plugin.mig_strategy == "none"


def test_snake_case_names_are_accepted_too() -> None:
    config = DevicePluginConfig.model_validate({"mig_strategy": "single", "kubelet_socket_path": "/k"})
    assert config.to_wire()["migStrategy"] == "single"


VIOLATIONS = [
    ("vendor", "intel", "vendor"),
    ("driver.enable", "maybe", "driver.enable"),
    ("driver.driverType", "gim", "driver.driverType"),
    ("driver.version", "6.4 beta", "driver.version"),
    ("driver.image", "Not An Image!", "driver.image"),
    ("driver.imagePullPolicy", "Sometimes", "driver.imagePullPolicy"),
    ("driver.amdgpuInstallerRepoURL", "ftp://repo", "driver.amdgpuInstallerRepoURL"),
    ("driver.cudaRepoURL", "mirror.example/cuda", "driver.cudaRepoURL"),
    ("driver.containerToolkitRepoURL", "https://mirror example", "driver.containerToolkitRepoURL"),
    ("driver.kernelModuleParameters", ["no-value"], "driver.kernelModuleParameters.0"),
    ("driver.upgradePolicy.maxParallelUpgrades", -1, "driver.upgradePolicy.maxParallelUpgrades"),
    ("driver.upgradePolicy.maxUnavailableNodes", "120%", "driver.upgradePolicy.maxUnavailableNodes"),
    ("driver.upgradePolicy.maxUnavailableNodes", "many", "driver.upgradePolicy.maxUnavailableNodes"),
    ("driver.upgradePolicy.nodeDrainPolicy.timeoutSeconds", -5, "nodeDrainPolicy.timeoutSeconds"),
    ("driver.upgradePolicy.nodeDrainPolicy.gracePeriodSeconds", -2, "nodeDrainPolicy.gracePeriodSeconds"),
    ("devicePlugin.resourceNamingStrategy", "all", "devicePlugin.resourceNamingStrategy"),
    ("devicePlugin.migStrategy", "auto", "devicePlugin.migStrategy"),
    ("devicePlugin.kubeletSocketPath", "relative/path", "devicePlugin.kubeletSocketPath"),
    ("devicePlugin.health.pollIntervalSeconds", 0, "devicePlugin.health.pollIntervalSeconds"),
    ("devicePlugin.health.rasUncorrectableThreshold", -1, "health.rasUncorrectableThreshold"),
    ("devicePlugin.health.ignoredXids", [-3], "devicePlugin.health.ignoredXids.0"),
    ("devicePlugin.resourceFilter.pciAddresses", ["03:00.0"], "resourceFilter.pciAddresses.0"),
    ("devicePlugin.resourceFilter.indices", [-1], "devicePlugin.resourceFilter.indices.0"),
    (
        "devicePlugin.sharing.timeSlicing.resources",
        [{"name": "nvidia.com/gpu", "replicas": 1}],
        "timeSlicing.resources.0.replicas",
    ),
    (
        "devicePlugin.sharing.timeSlicing.resources",
        [{"name": "gpu", "replicas": 2}],
        "timeSlicing.resources.0.name",
    ),
    ("nodeLabeller.labelSets", ["intel"], "nodeLabeller.labelSets.0"),
    ("nodeLabeller.intervalSeconds", 1, "nodeLabeller.intervalSeconds"),
    ("metricsExporter.port", 70000, "metricsExporter.port"),
    ("metricsExporter.namingSets", ["prometheus"], "metricsExporter.namingSets.0"),
    ("metricsExporter.fieldsAllow", ["gpu-temp"], "metricsExporter.fieldsAllow.0"),
    ("metricsExporter.extraLabels", {"bad-label": "x"}, "metricsExporter.extraLabels.bad-label"),
    ("metricsExporter.collectionIntervalSeconds", 0, "metricsExporter.collectionIntervalSeconds"),
    ("metricsExporter.serviceMonitor.interval", "30 seconds", "serviceMonitor.interval"),
    ("metricsExporter.podResourceAPISocketPath", "pod-resources", "metricsExporter.podResourceAPISocketPath"),
    ("testRunner.framework", "pytest", "testRunner.framework"),
    ("testRunner.trigger", "ALWAYS", "testRunner.trigger"),
    ("testRunner.iterations", 0, "testRunner.iterations"),
    ("testRunner.timeoutSeconds", 10, "testRunner.timeoutSeconds"),
    ("testRunner.recipe", "../../etc/passwd;", "testRunner.recipe"),
    ("configManager.profileLabel", "not a label", "configManager.profileLabel"),
    (
        "configManager.profiles",
        [{"name": "p", "amd": {"computePartition": "XPX"}}],
        "profiles.0.amd.computePartition",
    ),
    (
        "configManager.profiles",
        [{"name": "p", "nvidia": [{"migEnabled": True, "migDevices": {"huge": 1}}]}],
        "profiles.0.nvidia.0.migDevices.huge",
    ),
    ("remediation.taint.effect", "Evict", "remediation.taint.effect"),
    ("remediation.maxParallel", -1, "remediation.maxParallel"),
    ("remediation.rateLimit.maxRunsPerWindow", 0, "remediation.rateLimit.maxRunsPerWindow"),
    ("remediation.rebootTimeoutSeconds", 5, "remediation.rebootTimeoutSeconds"),
    ("remediation.playbook", "Remediation Playbook", "remediation.playbook"),
    ("selector.matchLabels", {"bad key!": "x"}, "selector.matchLabels.bad key!"),
    ("selector.matchExpressions", [{"key": "a", "operator": "Near"}], "selector.matchExpressions.0.operator"),
    ("driver.unknownField", 1, "driver.unknownField"),
    ("devicePlugin.health.unknownField", 1, "devicePlugin.health.unknownField"),
]


@pytest.mark.parametrize(("path", "value", "named"), VIOLATIONS, ids=[f"{v[0]}={v[1]!r}" for v in VIOLATIONS])
def test_each_constraint_violation_names_its_field(path: str, value: Any, named: str) -> None:
    errors = _errors(DeviceConfigSpec, _set({}, path, value))
    assert any(named in error.split(": ")[0] for error in errors), errors


CROSS_FIELD = [
    ({"vendor": "amd", "devicePlugin": {"migStrategy": "single"}}, "devicePlugin.migStrategy"),
    ({"vendor": "amd", "driver": {"kernelModuleType": "open"}}, "driver.kernelModuleType"),
    (
        {"vendor": "amd", "configManager": {"profiles": [{"name": "m", "nvidia": [{"migEnabled": True}]}]}},
        "configManager.profiles[].nvidia",
    ),
    ({"vendor": "nvidia", "devicePlugin": {"resourceNamingStrategy": "mixed"}}, "resourceNamingStrategy"),
    ({"vendor": "nvidia", "driver": {"driverType": "vf-passthrough"}}, "driver.driverType"),
    ({"draDriver": {"enable": True}}, "draDriver.enable"),
    (
        {"metricsExporter": {"fieldsAllow": ["gpu_health"], "fieldsDeny": ["gpu_health"]}},
        "fieldsDeny: gpu_health",
    ),
    ({"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}, "values: operator In"),
    (
        {"selector": {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}},
        "values: operator Exists",
    ),
]


@pytest.mark.parametrize(("data", "named"), CROSS_FIELD, ids=[c[1] for c in CROSS_FIELD])
def test_cross_field_rules_name_the_field(data: dict[str, Any], named: str) -> None:
    errors = _errors(DeviceConfigSpec, data)
    assert any(named in error for error in errors), errors


def test_auto_vendor_allows_both_vendors_settings() -> None:
    spec = DeviceConfigSpec.model_validate(
        {"devicePlugin": {"migStrategy": "single", "resourceNamingStrategy": "mixed"}}
    )
    assert spec.vendor == "auto"


def test_partition_rules() -> None:
    # Which compute/memory pairs a GPU accepts is checked against that GPU (gpu.profile_check), not here.
    assert any(
        "computePartition" in e
        for e in _errors(PartitionProfile, {"name": "p", "amd": {"computePartition": "XPX"}})
    )
    PartitionProfile.model_validate(
        {"name": "p", "amd": {"computePartition": "QPX", "memoryPartition": "NPS4"}}
    )
    assert any("set amd, amdModels, nvidia" in e for e in _errors(PartitionProfile, {"name": "p"}))
    assert any(
        "migEnabled is false" in e
        for e in _errors(PartitionProfile, {"name": "p", "nvidia": [{"migDevices": {"1g.10gb": 7}}]})
    )


def test_duplicate_names_rejected() -> None:
    shared = {"name": "nvidia.com/gpu", "replicas": 2}
    errors = _errors(DevicePluginConfig, {"sharing": {"timeSlicing": {"resources": [shared, shared]}}})
    assert any("listed more than once" in e for e in errors)
    profile = {"name": "p", "amd": {}}
    errors = _errors(DeviceConfigSpec, {"configManager": {"profiles": [profile, profile]}})
    assert any("used more than once" in e for e in errors)


def test_int_or_percent_normalises_numeric_strings() -> None:
    assert DriverUpgradePolicy.model_validate({"maxUnavailableNodes": "3"}).max_unavailable_nodes == 3
    assert DriverUpgradePolicy.model_validate({"maxUnavailableNodes": 2}).max_unavailable_nodes == 2
    assert DriverUpgradePolicy.model_validate({"maxUnavailableNodes": "0%"}).max_unavailable_nodes == "0%"


def test_health_threshold_needs_a_bound() -> None:
    errors = _errors(MetricsExporterConfig, {"healthThresholds": [{"metric": "gpu_health"}]})
    assert any("healthThresholds.0" in e and "set max, min or both" in e for e in errors)
    errors = _errors(
        MetricsExporterConfig, {"healthThresholds": [{"metric": "gpu_health", "min": 2, "max": 1}]}
    )
    assert any("greater than max" in e for e in errors)


def test_each_service_section_round_trips_through_its_own_model() -> None:
    spec = DeviceConfigSpec.model_validate(AMD_SPEC)
    for service, key in OPERAND_SECTIONS.items():
        section = spec.section(service)
        # What the operator writes to the service's ConfigMap parses back with the service's model.
        assert type(section).model_validate(section.to_wire()) == section
        assert spec.to_wire()[key] == section.to_wire()
    with pytest.raises(ValueError, match="unknown service"):
        spec.section("gpu-frobnicator")
