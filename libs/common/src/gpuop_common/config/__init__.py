"""Config models of every gpuop service, shared with the DeviceConfig CRD (its schema is generated).

Services load their section (e.g. `DevicePluginConfig`) from a mounted ConfigMap; the operator
validates a whole `DeviceConfigSpec` and writes each section to that service's ConfigMap.
"""

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
    Sharing,
    TimeSlicedResource,
    TimeSlicing,
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
from gpuop_common.config.spec import (
    OPERAND_SECTIONS,
    DeviceConfigSpec,
    LabelSelector,
    LabelSelectorRequirement,
)
from gpuop_common.config.testrunner import TestRunnerConfig

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
