"""`sharing`: GPUs shared between pods, by time-slicing (AMD and NVIDIA) or NVIDIA MPS.

One model for the device plugin (`devicePlugin.sharing`), the DRA driver (`draDriver.sharing`) and
the node labeller (which labels what the plugin advertises). Which device gets how many replicas is
decided by `gpuop_common.gpu.sharing.replicas_for`, so every operand reads this the same way.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from gpuop_common.config.base import AbsolutePath, ConfigModel, GpuModel

MAX_REPLICAS = 256
# NVIDIA's MPS control daemon serves at most 48 clients per GPU (compute capability >= 7.5).
MAX_MPS_REPLICAS = 48

# The resources gpuop advertises (docs/device-plugin.md): whole GPUs, AMD partition modes, MIG
# profiles (`+` spelled `.`). Sharing a name the plugin never advertises would silently do nothing.
_KNOWN_RESOURCE = re.compile(
    r"^(amd\.com/(gpu|(spx|dpx|tpx|qpx|cpx)_nps[1-8])"
    r"|nvidia\.com/(gpu|mig-([0-9]+c\.)?[0-9]+g\.[0-9]+gb(\.(me|gfx))*))$"
)
KNOWN_RESOURCES_HINT = (
    "amd.com/gpu, amd.com/<compute>_<memory> (e.g. amd.com/cpx_nps4), "
    "nvidia.com/gpu, nvidia.com/mig-<profile>"
)


def _known_resource(name: str) -> str:
    if name.endswith(".shared"):
        raise ValueError(f"{name!r}: name the plain resource; renameByDefault adds .shared")
    if not _KNOWN_RESOURCE.match(name):
        raise ValueError(f"{name!r} is not a GPU resource gpuop advertises ({KNOWN_RESOURCES_HINT})")
    return name


SharedResourceName = Annotated[str, Field(max_length=253), AfterValidator(_known_resource)]
Replicas = Annotated[int, Field(ge=2, le=MAX_REPLICAS)]


def _unset(value: object) -> bool:
    # Optional fields left out of the wire form: the CRD schema has no nulls (see config/schema.py).
    return value is None


class TimeSlicedResource(ConfigModel):
    """One resource shared by time-slicing (NVIDIA's `resources: [{name, replicas}]`)."""

    name: SharedResourceName = Field(
        description="Resource to share: amd.com/gpu, nvidia.com/gpu, a partition or MIG resource."
    )
    replicas: Replicas | None = Field(
        None,
        exclude_if=_unset,
        description="Pods that may share one device of this resource; default timeSlicing.replicas.",
    )


class ModelReplicas(ConfigModel):
    """A replica count for the GPUs of some models."""

    models: list[GpuModel] = Field(
        min_length=1,
        max_length=32,
        description="GPU models: name words (`H100`, `MI210`; whole words, any case) or PCI device id.",
    )
    replicas: Replicas = Field(description="Pods that may share one GPU (or partition) of these models.")


class TimeSlicing(ConfigModel):
    """GPU sharing by time-slicing: every GPU or partition is advertised `replicas` times.

    No memory or fault isolation between the pods sharing a device. A device's count: the first
    `models` entry naming its GPU, else its `resources` entry, else `replicas`; none of them: not shared."""

    replicas: Replicas | None = Field(
        None,
        exclude_if=_unset,
        description="Pods that may share one GPU or partition (at least 2); unset: only models/resources.",
    )
    resources: list[TimeSlicedResource] = Field(
        default_factory=list,
        max_length=64,
        description="Resources to share (default: every GPU, partition and MIG resource of the node).",
    )
    models: list[ModelReplicas] = Field(
        default_factory=list,
        max_length=32,
        description="Replica counts per GPU model; a GPU takes the first entry naming its model.",
    )
    rename_by_default: bool = Field(
        False, description="Advertise shared resources as `<name>.shared` instead of `<name>`."
    )
    fail_requests_greater_than_one: bool = Field(
        False, description="Refuse at Allocate a container asking for more than one replica."
    )

    @property
    def enabled(self) -> bool:
        return self.replicas is not None or bool(self.resources) or bool(self.models)

    @model_validator(mode="after")
    def _consistent(self) -> TimeSlicing:
        names = [resource.name for resource in self.resources]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"resources: {', '.join(duplicates)} listed more than once")
        if self.replicas is None and not self.models:
            missing = [n for n, r in enumerate(self.resources) if r.replicas is None]
            if missing:
                raise ValueError(
                    f"resources[{missing[0]}].replicas: no replica count "
                    "(set it, timeSlicing.replicas or models)"
                )
        return self


class Mps(ConfigModel):
    """NVIDIA Multi-Process Service: pods share a GPU through one MPS control daemon per node, with
    per-client memory and compute limits. Whole NVIDIA GPUs only (not MIG, not AMD)."""

    replicas: Annotated[int, Field(ge=2, le=MAX_MPS_REPLICAS)] = Field(
        description="MPS clients (pods) per GPU (2 to 48)."
    )
    memory_limit_mib: Annotated[int, Field(ge=1, le=1 << 24)] | None = Field(
        None,
        exclude_if=_unset,
        alias="memoryLimitMiB",
        description="Pinned device memory per client, MiB (default: the GPU's memory / replicas).",
    )
    active_thread_percentage: Annotated[int, Field(ge=1, le=100)] | None = Field(
        None,
        exclude_if=_unset,
        description="Share of the GPU's SMs per client, percent (default: 100 / replicas).",
    )
    rename_by_default: bool = Field(
        False, description="Advertise `nvidia.com/gpu.shared` instead of `nvidia.com/gpu`."
    )
    fail_requests_greater_than_one: bool = Field(
        True,
        description="Refuse at Allocate a container asking for more than one replica (NVIDIA's MPS default).",
    )
    root: AbsolutePath = Field(
        "/run/gpuop/mps", description="Host directory of the control daemon's pipes, logs and shared memory."
    )
    shm_size_mib: Annotated[int, Field(ge=1, le=1 << 24)] | None = Field(
        None,
        exclude_if=_unset,
        alias="shmSizeMiB",
        description="Size of the tmpfs at `<root>/shm`, the daemon's and its clients' /dev/shm, MiB "
        "(default: the kernel's tmpfs default, half the node's memory; used pages only count).",
    )


class Sharing(ConfigModel):
    """Device sharing between pods."""

    time_slicing: TimeSlicing = Field(default_factory=TimeSlicing, description="Time-slicing settings.")
    mps: Mps | None = Field(
        None, exclude_if=_unset, description="NVIDIA MPS settings (whole NVIDIA GPUs only)."
    )

    @model_validator(mode="after")
    def _one_strategy(self) -> Sharing:
        if self.mps is not None and self.time_slicing.enabled:
            raise ValueError("mps: cannot be combined with timeSlicing on one node; choose one")
        return self

    @property
    def strategy(self) -> str:
        """`none`, `time-slicing` or `mps`, as GFD's `gpu.sharing-strategy` label spells it."""
        if self.mps is not None:
            return "mps"
        return "time-slicing" if self.time_slicing.enabled else "none"

    def resource_vendors(self) -> set[str]:
        """`amd` / `nvidia` for each vendor this config names explicitly (for the vendor checks)."""
        vendors = {r.name.split(".", 1)[0] for r in self.time_slicing.resources}
        return vendors | ({"nvidia"} if self.mps is not None else set())


class TimeSlicingSharing(ConfigModel):
    """Device sharing for the DRA driver: time-slicing only (MPS is wired by the device plugin)."""

    time_slicing: TimeSlicing = Field(default_factory=TimeSlicing, description="Time-slicing settings.")

    def as_sharing(self) -> Sharing:
        return Sharing(time_slicing=self.time_slicing)
