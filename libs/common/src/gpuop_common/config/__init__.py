"""Config models of every gpuop service, shared with the DeviceConfig CRD (its schema is generated).

Services load their section (e.g. `DevicePluginConfig`) from a mounted ConfigMap; the operator
validates a whole `DeviceConfigSpec` and writes each section to that service's ConfigMap.

Names are imported on first use (module `__getattr__`): building every service's pydantic models
costs ~13 MB, and an agent needs only its own section, so `from gpuop_common.config import
DevicePluginConfig` builds just that module (and `base`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuop_common.config.base import ConfigModel, ImageSettings
    from gpuop_common.config.config_manager import (
        AmdPartition,
        ConfigManagerConfig,
        MigDeviceGroup,
        PartitionProfile,
    )
    from gpuop_common.config.device_plugin import (
        DevicePluginConfig,
        HealthChecks,
        ResourceFilter,
    )
    from gpuop_common.config.dra_driver import DraDriverConfig
    from gpuop_common.config.driver import DrainPolicy, DriverConfig, DriverUpgradePolicy, PodDeletionPolicy
    from gpuop_common.config.metrics_exporter import HealthThreshold, MetricsExporterConfig, ServiceMonitor
    from gpuop_common.config.node_labeller import NodeLabellerConfig
    from gpuop_common.config.remediation import RateLimit, RemediationConfig, Taint
    from gpuop_common.config.schema import (
        SchemaConversionError,
        device_config_openapi_schema,
        structural_problems,
        structural_schema,
    )
    from gpuop_common.config.sharing import ModelReplicas, Mps, Sharing, TimeSlicedResource, TimeSlicing
    from gpuop_common.config.spec import (
        OPERAND_SECTIONS,
        DeviceConfigSpec,
        LabelSelector,
        LabelSelectorRequirement,
    )
    from gpuop_common.config.testrunner import TestRunnerConfig

# Public name -> submodule defining it; the TYPE_CHECKING imports above must list the same names.
_SUBMODULE_OF = {
    "ConfigModel": "base",
    "ImageSettings": "base",
    "AmdPartition": "config_manager",
    "ConfigManagerConfig": "config_manager",
    "MigDeviceGroup": "config_manager",
    "PartitionProfile": "config_manager",
    "DevicePluginConfig": "device_plugin",
    "HealthChecks": "device_plugin",
    "ResourceFilter": "device_plugin",
    "ModelReplicas": "sharing",
    "Mps": "sharing",
    "Sharing": "sharing",
    "TimeSlicedResource": "sharing",
    "TimeSlicing": "sharing",
    "DraDriverConfig": "dra_driver",
    "DrainPolicy": "driver",
    "DriverConfig": "driver",
    "DriverUpgradePolicy": "driver",
    "PodDeletionPolicy": "driver",
    "HealthThreshold": "metrics_exporter",
    "MetricsExporterConfig": "metrics_exporter",
    "ServiceMonitor": "metrics_exporter",
    "NodeLabellerConfig": "node_labeller",
    "RateLimit": "remediation",
    "RemediationConfig": "remediation",
    "Taint": "remediation",
    "SchemaConversionError": "schema",
    "device_config_openapi_schema": "schema",
    "structural_problems": "schema",
    "structural_schema": "schema",
    "OPERAND_SECTIONS": "spec",
    "DeviceConfigSpec": "spec",
    "LabelSelector": "spec",
    "LabelSelectorRequirement": "spec",
    "TestRunnerConfig": "testrunner",
}

__all__ = [
    "OPERAND_SECTIONS",
    "AmdPartition",
    "ConfigManagerConfig",
    "ConfigModel",
    "DeviceConfigSpec",
    "DevicePluginConfig",
    "DraDriverConfig",
    "DrainPolicy",
    "DriverConfig",
    "DriverUpgradePolicy",
    "HealthChecks",
    "HealthThreshold",
    "ImageSettings",
    "LabelSelector",
    "LabelSelectorRequirement",
    "MetricsExporterConfig",
    "MigDeviceGroup",
    "ModelReplicas",
    "Mps",
    "NodeLabellerConfig",
    "PartitionProfile",
    "PodDeletionPolicy",
    "RateLimit",
    "RemediationConfig",
    "ResourceFilter",
    "SchemaConversionError",
    "ServiceMonitor",
    "Sharing",
    "Taint",
    "TestRunnerConfig",
    "TimeSlicedResource",
    "TimeSlicing",
    "device_config_openapi_schema",
    "structural_problems",
    "structural_schema",
]


def __getattr__(name: str) -> Any:
    submodule = _SUBMODULE_OF.get(name)
    if submodule is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{submodule}"), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
