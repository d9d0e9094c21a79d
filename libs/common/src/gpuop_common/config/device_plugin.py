"""`devicePlugin`: how GPUs are advertised to the kubelet, shared, health-checked and filtered."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from gpuop_common.config.base import AbsolutePath, ConfigModel, ImageSettings, PciAddress

# XIDs NVIDIA's device plugin treats as application errors, not GPU faults.
DEFAULT_IGNORED_XIDS = (13, 31, 43, 45, 68, 109)

ResourceName = Annotated[
    str, Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$", max_length=253)
]


class TimeSlicedResource(ConfigModel):
    """One resource shared by time-slicing."""

    name: ResourceName = Field(description="Extended resource to share, e.g. nvidia.com/gpu or amd.com/gpu.")
    replicas: int = Field(ge=2, le=256, description="Pods that may share one device (at least 2).")


class TimeSlicing(ConfigModel):
    """GPU sharing by time-slicing: every device is advertised `replicas` times."""

    rename_by_default: bool = Field(
        False, description="Advertise shared resources as `<name>.shared` instead of `<name>`."
    )
    fail_requests_greater_than_one: bool = Field(
        False, description="Reject pods asking for more than one replica of a shared resource."
    )
    resources: list[TimeSlicedResource] = Field(
        default_factory=list, max_length=64, description="Resources to share and their replica counts."
    )

    @model_validator(mode="after")
    def _unique_resources(self) -> TimeSlicing:
        names = [resource.name for resource in self.resources]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"resources: {', '.join(duplicates)} listed more than once")
        return self


class Sharing(ConfigModel):
    """Device sharing between pods; applies to every GPU on a node."""

    time_slicing: TimeSlicing = Field(default_factory=TimeSlicing, description="Time-slicing settings.")


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
