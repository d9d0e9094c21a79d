"""`driver`: the GPU kernel driver the operator installs and upgrades (AMD `DriverSpec` names)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from gpuop_common.config.base import ConfigModel, ImagePullPolicy, ImageRef, ImageSettings

# Integer count or percentage of nodes, as Kubernetes `maxUnavailable` fields are written.
IntOrPercent = Annotated[
    int | str,
    Field(
        json_schema_extra={"x-kubernetes-int-or-string": True, "pattern": r"^(100|[1-9]?[0-9])%$|^[0-9]+$"}
    ),
]

# A package repository root; file: is a mirror on the node's own disk (air-gapped sites).
REPO_URL_PATTERN = r"^(https?|file)://[^\s]+$"
ModuleParameter = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+=[^\s]*$", max_length=256)]


class DrainPolicy(ConfigModel):
    """How GPU nodes are drained before a driver change."""

    force: bool = Field(False, description="Delete pods not managed by a controller too.")
    timeout_seconds: int = Field(300, ge=0, le=86400, description="Give up draining after this long.")
    grace_period_seconds: int = Field(
        -1, ge=-1, le=86400, description="Pod termination grace period; -1 uses each pod's own."
    )
    ignore_daemon_sets: bool = Field(True, description="Leave DaemonSet pods running during the drain.")
    ignore_namespaces: list[str] = Field(
        default_factory=list, description="Namespaces whose pods are never evicted.", max_length=64
    )


class PodDeletionPolicy(ConfigModel):
    """How only the pods using GPUs are deleted (instead of a full drain)."""

    force: bool = Field(False, description="Delete pods not managed by a controller too.")
    timeout_seconds: int = Field(300, ge=0, le=86400, description="Give up deleting pods after this long.")
    grace_period_seconds: int = Field(
        -1, ge=-1, le=86400, description="Pod termination grace period; -1 uses each pod's own."
    )


class DriverUpgradePolicy(ConfigModel):
    """Rolling driver upgrades across the selected nodes."""

    enable: bool = Field(True, description="Roll a changed driver version through the nodes automatically.")
    max_parallel_upgrades: int = Field(
        1, ge=0, le=10000, description="Nodes upgraded at the same time; 0 means no limit."
    )
    max_unavailable_nodes: IntOrPercent = Field(
        "25%", description="Nodes (count or percentage, rounded up) allowed to be unavailable at once."
    )
    node_drain_policy: DrainPolicy = Field(
        default_factory=DrainPolicy, description="Drain settings used before the upgrade."
    )
    pod_deletion_policy: PodDeletionPolicy = Field(
        default_factory=PodDeletionPolicy, description="GPU pod deletion settings (drain wins if both)."
    )
    reboot_required: bool = Field(True, description="Reboot the node after installing the new driver.")

    @field_validator("max_unavailable_nodes")
    @classmethod
    def _count_or_percent(cls, value: int | str) -> int | str:
        if isinstance(value, int):
            if value < 0:
                raise ValueError("must be a non-negative count or a percentage like '25%'")
            return value
        if value.isdigit():
            return int(value)
        number = value.removesuffix("%")
        if not value.endswith("%") or not number.isdigit() or int(number) > 100:
            raise ValueError(f"{value!r} is neither a count nor a percentage between 0% and 100%")
        return value


class DriverConfig(ImageSettings):
    """The out-of-tree GPU kernel driver; disabled means the node's pre-installed driver is used."""

    enable: bool = Field(False, description="Install and manage the GPU driver on selected nodes.")
    # The Jobs run `gpuop-operator playbook`, so the image is the operator's, not a driver container's.
    image: ImageRef = Field(
        "",
        description="Image of the per-node driver and remediation Jobs; empty: the operator's own. "
        "It must contain `gpuop-operator playbook` (the operator image, e.g. a mirror or your build).",
    )
    image_pull_policy: ImagePullPolicy = Field(
        "IfNotPresent", description="Pull policy of the Jobs' image (when set; else the operator's)."
    )
    driver_type: Literal["container", "vf-passthrough", "pf-passthrough"] = Field(
        "container", description="AMD driver flavour: host driver, MxGPU VFs or PF passthrough to VMs."
    )
    kernel_module_type: Literal["auto", "open", "proprietary"] = Field(
        "auto", description="NVIDIA kernel module flavour."
    )
    version: str = Field(
        "",
        pattern=r"^$|^[0-9A-Za-z][0-9A-Za-z._+-]{0,63}$",
        description="Driver version to install; empty: the playbooks' default for the node's vendor "
        "(nodes are labelled with that concrete version).",
    )
    blacklist: bool = Field(
        False, description="Blacklist the in-box driver module on the host (takes effect after reboot)."
    )
    amdgpu_installer_repo_url: str = Field(
        "https://repo.radeon.com",
        alias="amdgpuInstallerRepoURL",
        pattern=REPO_URL_PATTERN,
        description="Package repository root used to build the AMD driver.",
    )
    cuda_repo_url: str = Field(
        "https://developer.download.nvidia.com/compute/cuda/repos",
        alias="cudaRepoURL",
        pattern=REPO_URL_PATTERN,
        description="NVIDIA CUDA repository root (holds ubuntu2204/x86_64, debian12/x86_64, rhel9/x86_64).",
    )
    container_toolkit_repo_url: str = Field(
        "https://nvidia.github.io/libnvidia-container",
        alias="containerToolkitRepoURL",
        pattern=REPO_URL_PATTERN,
        description="NVIDIA container toolkit repository root (holds stable/deb and stable/rpm).",
    )
    kernel_module_parameters: list[ModuleParameter] = Field(
        default_factory=list,
        max_length=64,
        description="Module parameters (`name=value`) passed to modprobe.",
    )
    upgrade_policy: DriverUpgradePolicy = Field(
        default_factory=DriverUpgradePolicy, description="How driver upgrades roll through the nodes."
    )
    # Keep by default: an uninstall drains every GPU node, and a DeviceConfig deleted by accident
    # must not take the drivers out from under a busy cluster.
    uninstall_policy: Literal["Uninstall", "Keep"] = Field(
        "Keep",
        description="On `enable: false` or DeviceConfig deletion: `Uninstall` removes the driver gpuop "
        "installed (drained, bounded like an upgrade); `Keep` leaves it on the nodes.",
    )
