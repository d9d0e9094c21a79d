"""NVIDIA GPU Feature Discovery labels (`nvidia.com/...`), same names and value formats as GFD.

Left out on purpose: `nvidia.com/gfd.timestamp` (it would change every pass and cost a write each
time; GFD has `--no-timestamp` for the same reason), and the labels whose facts the GPU backend does not
carry (`gpu.machine`, `gpu.mode`, MIG engine counts and multiprocessors, vGPU).

MIG strategies as GFD applies them:
- `none`: MIG devices are not described; `gpu.*` describes the physical GPUs.
- `single`: every GPU must have MIG on with one profile; then `gpu.count/product/memory` describe
  the MIG devices (`<product>-MIG-<profile>`). A node with MIG off everywhere reads as `none`; any
  other mix is invalid: `gpu.product=<product>-MIG-INVALID`, count and memory `0`.
- `mixed`: `gpu.*` describes the GPUs, each MIG profile gets `mig-<profile>.*` labels.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from gpuop_common.config.sharing import Sharing
from gpuop_common.gpu.models import GpuDevice, MigDevice, Vendor
from gpuop_common.gpu.sharing import SHARED_SUFFIX, DeviceSharing, gpu_sharing, replicas_for

from gpuop_node_labeller.options import LabelOptions
from gpuop_node_labeller.sanitize import sanitise, value_or_none

PREFIX = "nvidia.com"
MIB = 1 << 20
_PROFILE = re.compile(r"^(?:(\d+)c\.)?(\d+)g\.\d+gb")


def product_name(model: str) -> str:
    """GFD's sanitised product name: `NVIDIA H100 80GB HBM3` -> `NVIDIA-H100-80GB-HBM3`."""
    return sanitise(model, "-")


def mig_product(model: str, profile: str) -> str:
    return sanitise(f"{model} MIG {profile}", "-")


def slices(profile: str) -> tuple[str, str] | None:
    """(GPU-instance slices, compute-instance slices) from a profile name: `1c.3g.40gb` -> (3, 1)."""
    match = _PROFILE.match(profile)
    if match is None:
        return None
    gi = match.group(2)
    return gi, match.group(1) or gi


def _mig_on(gpu: GpuDevice) -> bool:
    return gpu.partition is not None and gpu.partition.compute == "mig"


def _mib(size: int | None) -> str | None:
    return str(size // MIB) if size is not None else None


def version_labels(gpus: Sequence[GpuDevice]) -> dict[str, str]:
    """Driver (`cuda.driver*`, named so by GFD) and CUDA driver API (`cuda.runtime*`) versions."""
    labels: dict[str, str] = {}
    driver = next((g.driver_version for g in gpus if g.driver_version), None)
    if driver and value_or_none(driver) == driver:
        parts = [*driver.split("."), "", ""]
        major, minor, rev = parts[0], parts[1], parts[2]
        for name, value in (("major", major), ("minor", minor), ("rev", rev)):
            labels[f"{PREFIX}/cuda.driver.{name}"] = value
        for name, value in (("major", major), ("minor", minor), ("revision", rev), ("full", driver)):
            labels[f"{PREFIX}/cuda.driver-version.{name}"] = value
    cuda = next((g.cuda_driver_version for g in gpus if g.cuda_driver_version), None)
    if cuda and re.fullmatch(r"\d+\.\d+", cuda):
        cmajor, cminor = cuda.split(".")
        labels[f"{PREFIX}/cuda.runtime.major"] = cmajor
        labels[f"{PREFIX}/cuda.runtime.minor"] = cminor
        labels[f"{PREFIX}/cuda.runtime-version.major"] = cmajor
        labels[f"{PREFIX}/cuda.runtime-version.minor"] = cminor
        labels[f"{PREFIX}/cuda.runtime-version.full"] = cuda
    return labels


def _architecture(gpu: GpuDevice) -> dict[str, str]:
    labels: dict[str, str] = {}
    if gpu.family:
        labels[f"{PREFIX}/gpu.family"] = gpu.family
    if gpu.compute_capability and re.fullmatch(r"\d+\.\d+", gpu.compute_capability):
        major, minor = gpu.compute_capability.split(".")
        labels[f"{PREFIX}/gpu.compute.major"] = major
        labels[f"{PREFIX}/gpu.compute.minor"] = minor
    return labels


def _shared_product(product: str, sharing: DeviceSharing | None) -> str:
    # As GFD: `-SHARED` on the product when the resource keeps its plain name, so a nodeSelector on
    # the product does not land on a shared device.
    renamed = sharing is not None and sharing.resource.endswith(SHARED_SUFFIX)
    return product + ("-SHARED" if sharing and not renamed else "")


def _full_gpu_labels(
    gpu: GpuDevice, count: int, replicas: int, sharing: DeviceSharing | None = None
) -> dict[str, str]:
    # As GFD: the configured replicas and strategy when shared.
    labels = {
        f"{PREFIX}/gpu.count": str(count),
        f"{PREFIX}/gpu.replicas": str(sharing.replicas if sharing else replicas),
        f"{PREFIX}/gpu.sharing-strategy": sharing.strategy if sharing else "none",
    }
    if product := product_name(gpu.model):
        labels[f"{PREFIX}/gpu.product"] = _shared_product(product, sharing)
    if (memory := _mib(gpu.vram_total_bytes)) is not None:
        labels[f"{PREFIX}/gpu.memory"] = memory
    return labels | _architecture(gpu)


def _mig_labels(
    prefix: str, gpu: GpuDevice, migs: Sequence[MigDevice], sharing: DeviceSharing | None = None
) -> dict[str, str]:
    """`<prefix>.count/product/memory/slices.*/replicas/sharing-strategy` for MIG devices of one
    profile; `sharing`: how the plugin shares their resource (time-slicing: MPS never shares MIG)."""
    profile = migs[0].profile or ""
    labels = {
        f"{prefix}.count": str(len(migs)),
        f"{prefix}.replicas": str(sharing.replicas) if sharing else "1",
        f"{prefix}.sharing-strategy": sharing.strategy if sharing else "none",
        f"{prefix}.product": _shared_product(mig_product(gpu.model, profile), sharing),
    }
    if (memory := _mib(migs[0].memory_bytes)) is not None:
        labels[f"{prefix}.memory"] = memory
    if (found := slices(profile)) is not None:
        labels[f"{prefix}.slices.gi"], labels[f"{prefix}.slices.ci"] = found
    return labels


def _single_strategy(gpus: Sequence[GpuDevice], sharing: Sharing) -> dict[str, str]:
    first = gpus[0]
    if not any(_mig_on(g) for g in gpus):
        return _full_gpu_labels(first, len(gpus), 1, gpu_sharing(first, sharing))
    migs = [m for g in gpus for m in g.mig_devices]
    profiles = {m.profile for m in migs}
    if not all(_mig_on(g) for g in gpus) or len(profiles) != 1 or None in profiles:
        return {
            f"{PREFIX}/gpu.count": "0",
            f"{PREFIX}/gpu.replicas": "0",
            f"{PREFIX}/gpu.memory": "0",
            f"{PREFIX}/gpu.sharing-strategy": "none",
            f"{PREFIX}/gpu.product": sanitise(f"{first.model} MIG INVALID", "-"),
        } | _architecture(first)
    # Single: the MIG devices are advertised as nvidia.com/gpu, shared as that resource.
    shared = replicas_for("nvidia.com/gpu", first, sharing, mig=True)
    labels = _mig_labels(f"{PREFIX}/gpu", first, migs, shared)
    return labels | _architecture(first)


def mig_resource(profile: str) -> str:
    """The plugin's resource for a MIG profile under the mixed strategy (`+` becomes `.`)."""
    return f"nvidia.com/mig-{profile.replace('+', '.')}"


def _mixed_strategy(gpus: Sequence[GpuDevice], sharing: Sharing) -> dict[str, str]:
    # MIG-enabled GPUs still appear in gpu.*, with replicas 0 when no GPU is shared as a whole.
    whole = [g for g in gpus if not _mig_on(g)]
    shared = gpu_sharing(whole[0], sharing) if whole else None
    labels = _full_gpu_labels(gpus[0], len(gpus), 1 if whole else 0, shared)
    by_profile: dict[str, list[MigDevice]] = {}
    owner: dict[str, GpuDevice] = {}
    for gpu in gpus:
        for mig in gpu.mig_devices if _mig_on(gpu) else ():
            if mig.profile:
                by_profile.setdefault(mig.profile, []).append(mig)
                owner.setdefault(mig.profile, gpu)
    for profile, migs in sorted(by_profile.items()):
        gpu = owner[profile]
        shared = replicas_for(mig_resource(profile), gpu, sharing, mig=True)
        labels |= _mig_labels(f"{PREFIX}/mig-{profile}", gpu, migs, shared)
    return labels


def nvidia_labels(gpus: Sequence[GpuDevice], options: LabelOptions) -> dict[str, str]:
    nvidia = [g for g in gpus if g.vendor == Vendor.NVIDIA]
    if not nvidia:
        return {}
    labels = version_labels(nvidia)
    capable = any(g.partition is not None and "mig" in g.partition.available_compute for g in nvidia)
    labels[f"{PREFIX}/mig.capable"] = str(capable).lower()
    mps = options.sharing.mps is not None and any(gpu_sharing(g, options.sharing) for g in nvidia)
    labels[f"{PREFIX}/mps.capable"] = str(mps).lower()
    cliques = Counter(g.nvlink_clique for g in nvidia if g.nvlink_clique)
    if len(cliques) == 1 and (clique := value_or_none(next(iter(cliques)))):
        labels[f"{PREFIX}/gpu.clique"] = clique
    if options.mig_strategy == "single":
        labels |= _single_strategy(nvidia, options.sharing)
    elif options.mig_strategy == "mixed":
        labels |= _mixed_strategy(nvidia, options.sharing)
    else:
        labels |= _full_gpu_labels(nvidia[0], len(nvidia), 1, gpu_sharing(nvidia[0], options.sharing))
    if options.mig_strategy != "none":
        labels[f"{PREFIX}/mig.strategy"] = options.mig_strategy
    return labels
