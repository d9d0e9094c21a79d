"""How many pods share each GPU device under a `Sharing` config (pure).

One reading of the config for every operand: the device plugin advertises `replicas` devices per
GPU or partition, the DRA driver publishes as many, and the node labeller writes the counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuop_common.config.sharing import Sharing
from gpuop_common.gpu.matching import model_matches
from gpuop_common.gpu.models import GpuDevice, Vendor

SHARED_SUFFIX = ".shared"


@dataclass(frozen=True, slots=True)
class DeviceSharing:
    """The sharing of one advertised device: strategy `time-slicing` or `mps`, and its replicas."""

    strategy: str
    replicas: int
    resource: str  # the advertised name (`<name>.shared` when renamed)


def replicas_for(
    resource: str, gpu: GpuDevice, sharing: Sharing, *, mig: bool = False
) -> DeviceSharing | None:
    """The sharing of a device of `resource` on `gpu`, None when it is not shared.

    Time-slicing: the first `models` entry naming the GPU, else the resource's entry, else
    `replicas`; with a `resources` list, other resources are not shared. MPS: whole NVIDIA GPUs
    (`nvidia.com/gpu`, not MIG devices) only; `mps_problems` says why the others are left alone."""
    if sharing.mps is not None:
        if resource != "nvidia.com/gpu" or gpu.vendor != Vendor.NVIDIA or mig:
            return None
        name = resource + SHARED_SUFFIX if sharing.mps.rename_by_default else resource
        return DeviceSharing("mps", sharing.mps.replicas, name)
    slicing = sharing.time_slicing
    if not slicing.enabled:
        return None
    entry = next((r for r in slicing.resources if r.name == resource), None)
    if slicing.resources and entry is None:
        return None
    by_model = next((m for m in slicing.models if any(model_matches(x, gpu) for x in m.models)), None)
    count = by_model.replicas if by_model else (entry.replicas if entry else None) or slicing.replicas
    if count is None:
        return None
    name = resource + SHARED_SUFFIX if slicing.rename_by_default else resource
    return DeviceSharing("time-slicing", count, name)


def gpu_sharing(gpu: GpuDevice, sharing: Sharing) -> DeviceSharing | None:
    """The sharing of a GPU under its vendor's whole-GPU resource (`amd.com/gpu`, `nvidia.com/gpu`),
    what the labels describe; a MIG-enabled GPU counts as not shared as a whole."""
    mig = gpu.partition is not None and gpu.partition.compute == "mig"
    return replicas_for(f"{gpu.vendor.value}.com/gpu", gpu, sharing, mig=mig)


def mps_problems(gpus: Iterable[GpuDevice], sharing: Sharing) -> list[str]:
    """Why MPS cannot serve some GPUs of a node (AMD GPUs, MIG-enabled GPUs); empty when it can."""
    if sharing.mps is None:
        return []
    problems = []
    for gpu in gpus:
        if gpu.vendor != Vendor.NVIDIA:
            problems.append(
                f"sharing.mps: GPU {gpu.id} is {gpu.vendor.value}; MPS is NVIDIA-only, not shared"
            )
        elif gpu.partition is not None and gpu.partition.compute == "mig":
            problems.append(f"sharing.mps: GPU {gpu.id} has MIG enabled; MPS needs whole GPUs, not shared")
    return problems


def unshared_name(resource: str) -> str:
    """The plain resource of a possibly renamed one (`nvidia.com/gpu.shared` -> `nvidia.com/gpu`)."""
    return resource.removesuffix(SHARED_SUFFIX)
