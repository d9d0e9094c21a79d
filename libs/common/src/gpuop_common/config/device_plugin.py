"""`devicePlugin`: how GPUs are advertised to the kubelet, shared, health-checked and filtered."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from gpuop_common.config.base import AbsolutePath, ConfigModel, ImageSettings, PciAddress
from gpuop_common.config.sharing import Mps, Sharing, TimeSlicedResource, TimeSlicing

__all__ = [
    "DEFAULT_IGNORED_XIDS",
    "DevicePluginConfig",
    "HealthChecks",
    "Mps",
    "ResourceFilter",
    "Sharing",
    "TimeSlicedResource",
    "TimeSlicing",
]

# XIDs NVIDIA's device plugin treats as application errors, not GPU faults.
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)


class HealthChecks(ConfigModel):
    """When a device is reported Unhealthy to the kubelet."""

    enable: bool = Field(True, description="Check device health and report unhealthy devices.")
    poll_interval_seconds: int = Field(30, ge=1, le=86400, description="Seconds between health polls.")
    ras_uncorrectable_threshold: int = Field(
        0, ge=0, le=1_000_000, description="Uncorrectable ECC/RAS errors tolerated before Unhealthy (AMD)."
    )
    ignored_xids: list[Annotated[int, Field(ge=0, le=65535)]] = Field(
        default_factory=lambda: list(DEFAULT_IGNORED_XIDS),
        max_length=256,
        description="NVIDIA XID error codes that are application errors, not device faults.",
    )
    recover_automatically: bool = Field(
        True, description="Report a device Healthy again once its checks pass, without a restart."
    )


class ResourceFilter(ConfigModel):
    """Expose only some GPUs of a node; empty lists mean no restriction on that attribute."""

    pci_addresses: list[PciAddress] = Field(
        default_factory=list, max_length=256, description="Only GPUs at these PCI addresses."
    )
    indices: list[Annotated[int, Field(ge=0, le=1023)]] = Field(
        default_factory=list, max_length=1024, description="Only GPUs with these indices."
    )
    models: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list,
        max_length=64,
        description="Only GPUs whose product name contains one of these strings (case-insensitive).",
    )


class DevicePluginConfig(ImageSettings):
    """The kubelet device plugin (and its node-local resource manager)."""

    enable: bool = Field(True, description="Run the device plugin on selected nodes.")
    resource_naming_strategy: Literal["single", "mixed"] = Field(
        "single",
        description="AMD partitions: one amd.com/gpu resource (single) or one per partition type (mixed).",
    )
    mig_strategy: Literal["none", "single", "mixed"] = Field(
        "none",
        description="NVIDIA MIG devices: hidden (none), as nvidia.com/gpu (single), per profile (mixed).",
    )
    cdi: bool = Field(False, description="Hand devices to containers as CDI device names.")
    kubelet_socket_path: AbsolutePath = Field(
        "/var/lib/kubelet/device-plugins", description="Kubelet device-plugin directory on the host."
    )
    sharing: Sharing = Field(default_factory=Sharing, description="Device sharing between pods.")
    health: HealthChecks = Field(default_factory=HealthChecks, description="Device health checks.")
    resource_filter: ResourceFilter = Field(
        default_factory=ResourceFilter, description="Restrict which GPUs are advertised."
    )

    @model_validator(mode="after")
    def _mps_needs_whole_gpus(self) -> DevicePluginConfig:
        # A MIG strategy advertises MIG devices, which MPS never shares: the config would promise
        # replicas the plugin cannot give (NVIDIA's plugin refuses MPS with mixed for the same reason).
        if self.sharing.mps is not None and self.mig_strategy != "none":
            raise ValueError(
                f"sharing.mps: cannot be combined with migStrategy {self.mig_strategy}; MPS shares "
                "whole GPUs only (time-slice MIG devices with sharing.timeSlicing instead)"
            )
        return self
