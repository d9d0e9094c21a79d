"""`configManager`: GPU partitioning profiles, AMD compute/memory partitions and NVIDIA MIG layouts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Literal

from pydantic import Field, model_validator

from gpuop_common.config.base import ConfigModel, GpuModel, ImageSettings, LabelKey, LabelValue

MigProfile = Annotated[str, Field(pattern=r"^([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\+(me|gfx))*$", max_length=32)]
GpuIndex = Annotated[int, Field(ge=0, le=1023)]
PROFILES_MAX = 128


class AmdPartition(ConfigModel):
    """AMD Instinct partition mode applied to the GPUs of a node."""

    compute_partition: Literal["SPX", "DPX", "TPX", "QPX", "CPX"] = Field(
        "SPX", description="Compute partition: 1, 2, 3, 4 or one-per-XCD partitions per GPU."
    )
    memory_partition: Literal["NPS1", "NPS2", "NPS4", "NPS8"] = Field(
        "NPS1",
        description="Memory partition (NUMA nodes per socket). Which pairs a GPU accepts is checked "
        "against the GPU (e.g. MI300X: NPS4 with QPX or CPX only).",
    )
    skipped_gpus: list[GpuIndex] = Field(
        default_factory=list, max_length=1024, description="GPU indices left as they are."
    )


class AmdModelPartition(AmdPartition):
    """AMD partition mode for the GPUs of some models only (before `amd`, which covers the rest)."""

    models: list[GpuModel] = Field(
        min_length=1,
        max_length=32,
        description="GPU models this applies to: name words (`MI300X`) or PCI device id (`0x74a1`).",
    )


class MigDeviceGroup(ConfigModel):
    """MIG setting for a group of NVIDIA GPUs (one `mig-parted` entry)."""

    devices: list[GpuIndex] = Field(
        default_factory=list, max_length=1024, description="GPU indices; empty means all GPUs."
    )
    models: list[GpuModel] = Field(
        default_factory=list,
        max_length=32,
        description="Only GPUs of these models (name words like `H100`, or PCI device id); empty: any.",
    )
    mig_enabled: bool = Field(False, description="Turn MIG mode on for these GPUs.")
    mig_devices: dict[MigProfile, Annotated[int, Field(ge=1, le=7)]] = Field(
        default_factory=dict, description="MIG instances per GPU by profile, e.g. {'1g.10gb': 7}."
    )

    @model_validator(mode="after")
    def _devices_need_mig(self) -> MigDeviceGroup:
        if self.mig_devices and not self.mig_enabled:
            raise ValueError("migDevices is set but migEnabled is false")
        return self


class PartitionProfile(ConfigModel):
    """A named partition layout and the nodes it applies to."""

    name: str = Field(
        pattern=r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$", max_length=63, description="Profile name."
    )
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict,
        description="Nodes with all these labels get this profile; empty: only nodes naming it in a label.",
    )
    amd: AmdPartition | None = Field(
        None, description="AMD compute/memory partitioning of every AMD GPU no amdModels entry covers."
    )
    amd_models: list[AmdModelPartition] = Field(
        default_factory=list,
        max_length=32,
        description="AMD partitioning per GPU model; a GPU takes the first entry naming its model.",
    )
    nvidia: list[MigDeviceGroup] | None = Field(None, max_length=64, description="NVIDIA MIG layout.")

    @model_validator(mode="after")
    def _has_a_layout(self) -> PartitionProfile:
        if self.amd is None and not self.amd_models and self.nvidia is None:
            raise ValueError(f"profile {self.name}: set amd, amdModels, nvidia or more than one")
        return self


class ConfigManagerConfig(ImageSettings):
    """The GPU partitioning agent."""

    enable: bool = Field(False, description="Run the config manager on selected nodes.")
    profiles: list[PartitionProfile] = Field(
        default_factory=list,
        max_length=PROFILES_MAX,
        description="Partition profiles, first matching one wins.",
    )
    profile_label: LabelKey = Field(
        "gpuop.dev/gpu-config-profile",
        description="Node label naming a profile explicitly; wins over nodeSelector matches.",
    )
    vendor_profile_labels: list[LabelKey] = Field(
        default_factory=lambda: ["dcm.amd.com/gpu-config-profile", "nvidia.com/mig.config"],
        max_length=8,
        description="Vendor labels also naming a profile (AMD device config manager, NVIDIA MIG manager).",
    )
    paused_operands: list[
        Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
    ] = Field(
        default_factory=lambda: [
            "device-plugin",
            "dra-driver",
            "metrics-exporter",
            "node-labeller",
            "test-runner",
        ],
        max_length=16,
        description="Operands whose `gpuop.dev/deploy.<name>` node label is set to "
        "`paused-for-config-change` while the GPUs are repartitioned.",
    )
    profiles_config_map: str = Field(
        "",
        pattern=r"^$|^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        max_length=253,
        description="A ConfigMap in the operator's namespace whose `profiles.yaml` key lists more "
        "profiles (a YAML list, as `profiles`). Precedence by name: `profiles`, then these, then the "
        "profiles the chart ships. Missing or invalid: the DeviceConfig is Degraded naming this "
        "field, and the last good profiles stay.",
    )
    quiesce_timeout_seconds: int = Field(
        300, ge=1, le=86400, description="How long to wait for operand and GPU pods to leave the node."
    )

    @model_validator(mode="after")
    def _unique_names(self) -> ConfigManagerConfig:
        names = [profile.name for profile in self.profiles]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"profiles: name {', '.join(duplicates)} used more than once")
        return self


# The config-manager chart's own profiles, next to config.yaml in the agent's ConfigMap: under the
# operator config.yaml is the DeviceConfig's section, which gets these added (`with_profiles_added`).
SHIPPED_PROFILES_KEY = "shipped-profiles.yaml"
# The key of the ConfigMap `profilesConfigMap` names (a YAML list of profiles, as `profiles`).
NAMED_PROFILES_KEY = "profiles.yaml"


def with_profiles_added(config: ConfigManagerConfig, more: Sequence[PartitionProfile]) -> ConfigManagerConfig:
    """The section's own profiles, then each of `more` whose name is not taken yet (the first of a
    name wins; the section's nodeSelector matches are tried first, since the first match wins)."""
    taken = {profile.name for profile in config.profiles}
    added: list[PartitionProfile] = []
    for profile in more:
        if profile.name not in taken:
            taken.add(profile.name)
            added.append(profile)
    room = PROFILES_MAX - len(config.profiles)  # the agent refuses a longer list
    added = added[: max(room, 0)]
    if not added:
        return config
    return config.model_copy(update={"profiles": [*config.profiles, *added]})
