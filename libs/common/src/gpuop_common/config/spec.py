"""`DeviceConfigSpec`: the spec of the gpuop.dev/v1alpha1 DeviceConfig, one section per operand.

Cross-field rules that a single section cannot check live here; each message starts with the path of
the field at fault so `kubectl` users and log readers see where to look.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import Field, model_validator

from gpuop_common.config.base import ConfigModel, LabelKey, LabelValue
from gpuop_common.config.config_manager import ConfigManagerConfig
from gpuop_common.config.device_plugin import DevicePluginConfig
from gpuop_common.config.dra_driver import DraDriverConfig
from gpuop_common.config.driver import DriverConfig
from gpuop_common.config.metrics_exporter import MetricsExporterConfig
from gpuop_common.config.node_labeller import NodeLabellerConfig
from gpuop_common.config.remediation import RemediationConfig
from gpuop_common.config.sharing import Sharing
from gpuop_common.config.testrunner import TestRunnerConfig

Vendor = Literal["auto", "amd", "nvidia"]

# Service (console script `gpuop-<service>`, chart `charts/<service>`) -> its DeviceConfigSpec section.
OPERAND_SECTIONS: dict[str, str] = {
    "driver": "driver",
    "device-plugin": "devicePlugin",
    "dra-driver": "draDriver",
    "node-labeller": "nodeLabeller",
    "metrics-exporter": "metricsExporter",
    "test-runner": "testRunner",
    "config-manager": "configManager",
    "remediation": "remediation",
}


class LabelSelectorRequirement(ConfigModel):
    """One `matchExpressions` entry of a Kubernetes label selector."""

    key: LabelKey = Field(description="Label key the requirement applies to.")
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"] = Field(description="Set operator.")
    values: list[LabelValue] = Field(
        default_factory=list,
        max_length=256,
        description="Values for In/NotIn; empty for Exists/DoesNotExist.",
    )

    @model_validator(mode="after")
    def _values_match_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values: operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values: operator {self.operator} takes no values")
        return self


class LabelSelector(ConfigModel):
    """Kubernetes label selector; an empty selector matches every node."""

    match_labels: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, description="Labels a node must have, with these exact values."
    )
    match_expressions: list[LabelSelectorRequirement] = Field(
        default_factory=list, max_length=64, description="Set-based requirements, all must hold."
    )

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when every matchLabels entry and every matchExpressions requirement holds."""
        if any(labels.get(key) != value for key, value in self.match_labels.items()):
            return False
        return all(_requirement_holds(req, labels) for req in self.match_expressions)


def _requirement_holds(req: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return not present
    if req.operator == "In":
        return present and labels[req.key] in req.values
    # NotIn matches nodes without the key too, as in Kubernetes.
    return not present or labels[req.key] not in req.values


def _snake(camel: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in camel)


def _sharing_sections(spec: DeviceConfigSpec) -> list[tuple[str, Sharing]]:
    return [
        ("devicePlugin.sharing", spec.device_plugin.sharing),
        ("draDriver.sharing", spec.dra_driver.sharing.as_sharing()),
    ]


def _amd_only_settings(spec: DeviceConfigSpec) -> list[str]:
    problems = [
        f"{path}.timeSlicing.resources"
        for path, sharing in _sharing_sections(spec)
        if "amd" in sharing.resource_vendors()
    ]
    if spec.device_plugin.resource_naming_strategy != "single":
        problems.append("devicePlugin.resourceNamingStrategy")
    if spec.driver.driver_type != "container":
        problems.append("driver.driverType")
    if any(profile.amd is not None for profile in spec.config_manager.profiles):
        problems.append("configManager.profiles[].amd")
    if any(recipe.vendor == "amd" for recipe in spec.test_runner.recipes):
        problems.append("testRunner.recipes[].vendor")
    return problems


def _nvidia_only_settings(spec: DeviceConfigSpec) -> list[str]:
    problems = []
    for path, sharing in _sharing_sections(spec):
        if sharing.mps is not None:
            problems.append(f"{path}.mps")
        elif "nvidia" in sharing.resource_vendors():
            problems.append(f"{path}.timeSlicing.resources")
    if spec.device_plugin.mig_strategy != "none":
        problems.append("devicePlugin.migStrategy")
    if spec.driver.kernel_module_type != "auto":
        problems.append("driver.kernelModuleType")
    if any(profile.nvidia is not None for profile in spec.config_manager.profiles):
        problems.append("configManager.profiles[].nvidia")
    if spec.test_runner.framework == "DCGM":
        problems.append("testRunner.framework")
    if any(recipe.vendor == "nvidia" for recipe in spec.test_runner.recipes):
        problems.append("testRunner.recipes[].vendor")
    return problems


class DeviceConfigSpec(ConfigModel):
    """Which nodes a DeviceConfig manages and how each operand runs on them."""

    def section(self, service: str) -> ConfigModel:
        """The config section of `service` (a key of OPERAND_SECTIONS), e.g. to write its ConfigMap."""
        try:
            key = OPERAND_SECTIONS[service]
        except KeyError:
            raise ValueError(
                f"unknown service {service!r}; expected one of {', '.join(OPERAND_SECTIONS)}"
            ) from None
        value = getattr(self, _snake(key))
        assert isinstance(value, ConfigModel)
        if service == "node-labeller" and "sharing" not in self.node_labeller.model_fields_set:
            # The labeller labels what the plugin advertises: by default it gets the plugin's sharing.
            return self.node_labeller.model_copy(update={"sharing": self.effective_sharing})
        return value

    @property
    def effective_sharing(self) -> Sharing:
        """The sharing of whichever of the device plugin and the DRA driver runs."""
        return self.dra_driver.sharing.as_sharing() if self.dra_driver.enable else self.device_plugin.sharing

    selector: LabelSelector = Field(
        default_factory=LabelSelector, description="Nodes this DeviceConfig manages."
    )
    vendor: Vendor = Field("auto", description="GPU vendor of the selected nodes; auto detects it per node.")
    driver: DriverConfig = Field(default_factory=DriverConfig, description="GPU kernel driver.")
    device_plugin: DevicePluginConfig = Field(
        default_factory=DevicePluginConfig, description="Kubelet device plugin."
    )
    dra_driver: DraDriverConfig = Field(
        default_factory=DraDriverConfig, description="Dynamic Resource Allocation driver."
    )
    node_labeller: NodeLabellerConfig = Field(
        default_factory=NodeLabellerConfig, description="GPU node labels."
    )
    metrics_exporter: MetricsExporterConfig = Field(
        default_factory=MetricsExporterConfig, description="Prometheus metrics exporter."
    )
    test_runner: TestRunnerConfig = Field(
        default_factory=TestRunnerConfig, description="GPU validation tests."
    )
    config_manager: ConfigManagerConfig = Field(
        default_factory=ConfigManagerConfig, description="GPU partitioning."
    )
    remediation: RemediationConfig = Field(
        default_factory=RemediationConfig, description="Automatic node remediation."
    )

    @model_validator(mode="after")
    def _consistent(self) -> DeviceConfigSpec:
        if self.dra_driver.enable and self.device_plugin.enable:
            raise ValueError("draDriver.enable: the DRA driver and the device plugin cannot both be enabled")
        if self.vendor == "amd" and (fields := _nvidia_only_settings(self)):
            raise ValueError(f"{', '.join(fields)}: NVIDIA-only settings on a vendor amd DeviceConfig")
        if self.vendor == "nvidia" and (fields := _amd_only_settings(self)):
            raise ValueError(f"{', '.join(fields)}: AMD-only settings on a vendor nvidia DeviceConfig")
        return self
