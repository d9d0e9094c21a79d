"""labels_for() on every simulated node profile: the full label set, compared key by key."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from gpuop_common.config import Sharing
from gpuop_common.gpu import GpuDevice
from gpuop_node_labeller import LabelOptions, labels_for
from gpuop_sim.nodes import NodeRootInfo
from gpuop_sim.nodes.amd_root import AMDGPU_SRCVERSION

NodeGpus = Callable[..., tuple[NodeRootInfo, list[GpuDevice]]]


def amd_expected(values: dict[str, str], counts: dict[str, int], extra: dict[str, str]) -> dict[str, str]:
    """The AMD labeller's single-value shape: amd.com and beta copies plus the beta counter."""
    labels = dict(extra)
    for kind, value in values.items():
        labels[f"amd.com/gpu.{kind}"] = value
        labels[f"beta.amd.com/gpu.{kind}"] = value
        labels[f"beta.amd.com/gpu.{kind}.{value}"] = str(counts[kind])
    return labels


MI210X8 = amd_expected(
    {
        "family": "AI",
        "device-id": "740f",
        "product-name": "Instinct_MI210",
        "vram": "64G",
        "simd-count": "416",
        "cu-count": "104",
    },
    dict.fromkeys(["family", "device-id", "product-name", "vram", "simd-count", "cu-count"], 8),
    {
        "amd.com/gpu.driver-version": "6.10.5",
        "amd.com/gpu.driver-src-version": AMDGPU_SRCVERSION,
        "amd.com/gpu.compute-partitioning-supported": "false",
        "amd.com/gpu.memory-partitioning-supported": "false",
        "gpuop.dev/gpu.present": "true",
        "gpuop.dev/gpu.vendor": "amd",
        "gpuop.dev/gpu.count": "8",
        "gpuop.dev/gpu.model": "AMD-Instinct-MI210",
        "gpuop.dev/gpu.device-id": "740f",
        "gpuop.dev/gpu.architecture": "gfx90a",
        "gpuop.dev/gpu.driver-version": "6.10.5",
        "gpuop.dev/gpu.memory-mib": "65536",
        "gpuop.dev/gpu.partition.compute": "none",
        "gpuop.dev/gpu.partition.memory": "none",
        "gpuop.dev/gpu.partition.count": "0",
        "gpuop.dev/gpu.replicas": "1",
        "gpuop.dev/gpu.sharing-strategy": "none",
    },
)

MI300X_SPX = amd_expected(
    {
        "family": "AI",
        "device-id": "74a1",
        "product-name": "Instinct_MI300X_OAM",
        "vram": "192G",
        "simd-count": "1216",
        "cu-count": "304",
    },
    dict.fromkeys(["family", "device-id", "product-name", "vram", "simd-count", "cu-count"], 8),
    {
        "amd.com/gpu.driver-version": "6.10.5",
        "amd.com/gpu.driver-src-version": AMDGPU_SRCVERSION,
        "amd.com/gpu.compute-memory-partition": "spx_nps1",
        "amd.com/gpu.compute-partitioning-supported": "true",
        "amd.com/gpu.memory-partitioning-supported": "true",
        "gpuop.dev/gpu.present": "true",
        "gpuop.dev/gpu.vendor": "amd",
        "gpuop.dev/gpu.count": "8",
        "gpuop.dev/gpu.model": "AMD-Instinct-MI300X",
        "gpuop.dev/gpu.device-id": "74a1",
        "gpuop.dev/gpu.architecture": "gfx942",
        "gpuop.dev/gpu.driver-version": "6.10.5",
        "gpuop.dev/gpu.memory-mib": "196608",
        "gpuop.dev/gpu.partition.compute": "spx",
        "gpuop.dev/gpu.partition.memory": "nps1",
        "gpuop.dev/gpu.partition.count": "0",
        "gpuop.dev/gpu.replicas": "1",
        "gpuop.dev/gpu.sharing-strategy": "none",
    },
)

# The real CPX capture shows 63 partitions (the last GPU has 7), each 38 CUs; the backend splits the
# VRAM among a GPU's visible partitions, so the 7-partition GPU reads 27G per partition.
MI300X_CPX = amd_expected(
    {
        "family": "AI",
        "device-id": "74a1",
        "product-name": "Instinct_MI300X_OAM",
        "simd-count": "152",
        "cu-count": "38",
    },
    dict.fromkeys(["family", "device-id", "product-name", "simd-count", "cu-count"], 63),
    {
        "amd.com/gpu.vram.24G": "56",
        "amd.com/gpu.vram.27G": "7",
        "beta.amd.com/gpu.vram.24G": "56",
        "beta.amd.com/gpu.vram.27G": "7",
        "amd.com/gpu.driver-version": "6.10.5",
        "amd.com/gpu.driver-src-version": AMDGPU_SRCVERSION,
        "amd.com/gpu.compute-memory-partition": "cpx_nps4",
        "amd.com/gpu.compute-partitioning-supported": "true",
        "amd.com/gpu.memory-partitioning-supported": "true",
        "gpuop.dev/gpu.present": "true",
        "gpuop.dev/gpu.vendor": "amd",
        "gpuop.dev/gpu.count": "8",
        "gpuop.dev/gpu.model": "AMD-Instinct-MI300X",
        "gpuop.dev/gpu.device-id": "74a1",
        "gpuop.dev/gpu.architecture": "gfx942",
        "gpuop.dev/gpu.driver-version": "6.10.5",
        "gpuop.dev/gpu.memory-mib": "196608",
        "gpuop.dev/gpu.partition.compute": "cpx",
        "gpuop.dev/gpu.partition.memory": "nps4",
        "gpuop.dev/gpu.partition.count": "63",
        "gpuop.dev/gpu.replicas": "1",
        "gpuop.dev/gpu.sharing-strategy": "none",
    },
)

# MI25 has no FRU product_name file: the marketing name stands in, as libdrm's does for the AMD labeller.
SINGLE_MI25 = amd_expected(
    {
        "family": "AI",
        "device-id": "6860",
        "product-name": "AMD_Radeon_Instinct_MI25",
        "vram": "16G",
        "simd-count": "256",
        "cu-count": "64",
    },
    dict.fromkeys(["family", "device-id", "product-name", "vram", "simd-count", "cu-count"], 1),
    {
        "amd.com/gpu.driver-version": "5.18.13",
        "amd.com/gpu.driver-src-version": AMDGPU_SRCVERSION,
        "amd.com/gpu.compute-partitioning-supported": "false",
        "amd.com/gpu.memory-partitioning-supported": "false",
        "gpuop.dev/gpu.present": "true",
        "gpuop.dev/gpu.vendor": "amd",
        "gpuop.dev/gpu.count": "1",
        "gpuop.dev/gpu.model": "AMD-Radeon-Instinct-MI25",
        "gpuop.dev/gpu.device-id": "6860",
        "gpuop.dev/gpu.architecture": "gfx900",
        "gpuop.dev/gpu.driver-version": "5.18.13",
        "gpuop.dev/gpu.memory-mib": "16368",
        "gpuop.dev/gpu.partition.compute": "none",
        "gpuop.dev/gpu.partition.memory": "none",
        "gpuop.dev/gpu.partition.count": "0",
        "gpuop.dev/gpu.replicas": "1",
        "gpuop.dev/gpu.sharing-strategy": "none",
    },
)

NVIDIA_COMMON = {
    "nvidia.com/cuda.driver.major": "550",
    "nvidia.com/cuda.driver.minor": "54",
    "nvidia.com/cuda.driver.rev": "15",
    "nvidia.com/cuda.driver-version.major": "550",
    "nvidia.com/cuda.driver-version.minor": "54",
    "nvidia.com/cuda.driver-version.revision": "15",
    "nvidia.com/cuda.driver-version.full": "550.54.15",
    "nvidia.com/cuda.runtime.major": "12",
    "nvidia.com/cuda.runtime.minor": "4",
    "nvidia.com/cuda.runtime-version.major": "12",
    "nvidia.com/cuda.runtime-version.minor": "4",
    "nvidia.com/cuda.runtime-version.full": "12.4",
    "nvidia.com/gpu.family": "hopper",
    "nvidia.com/gpu.compute.major": "9",
    "nvidia.com/gpu.compute.minor": "0",
    "nvidia.com/mig.capable": "true",
    "nvidia.com/mps.capable": "false",
    "nvidia.com/gpu.sharing-strategy": "none",
    "gpuop.dev/gpu.present": "true",
    "gpuop.dev/gpu.vendor": "nvidia",
    "gpuop.dev/gpu.count": "8",
    "gpuop.dev/gpu.model": "NVIDIA-H100-80GB-HBM3",
    "gpuop.dev/gpu.device-id": "2330",
    "gpuop.dev/gpu.architecture": "hopper",
    "gpuop.dev/gpu.driver-version": "550.54.15",
    "gpuop.dev/gpu.memory-mib": "81559",
    "gpuop.dev/gpu.partition.memory": "none",
}

H100X8 = {
    **NVIDIA_COMMON,
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.replicas": "1",
    "gpuop.dev/gpu.partition.compute": "none",
    "gpuop.dev/gpu.partition.count": "0",
    "gpuop.dev/gpu.replicas": "1",
    "gpuop.dev/gpu.sharing-strategy": "none",
}

# MIG on GPUs 0-2 only (7x1g.10gb, 2x3g.40gb, 3g.40gb+2g.20gb+1g.10gb).
H100_MIG_BASE = {
    **NVIDIA_COMMON,
    "gpuop.dev/gpu.partition.compute": "mixed",
    "gpuop.dev/gpu.partition.count": "12",
    "gpuop.dev/gpu.replicas": "1",
    "gpuop.dev/gpu.sharing-strategy": "none",
}


def mig_profile(profile: str, count: int, memory: int, gi: int, ci: int) -> dict[str, str]:
    prefix = f"nvidia.com/mig-{profile}"
    return {
        f"{prefix}.count": str(count),
        f"{prefix}.memory": str(memory),
        f"{prefix}.product": f"NVIDIA-H100-80GB-HBM3-MIG-{profile}",
        f"{prefix}.replicas": "1",
        f"{prefix}.sharing-strategy": "none",
        f"{prefix}.slices.gi": str(gi),
        f"{prefix}.slices.ci": str(ci),
    }


H100_MIG_MIXED = {
    **H100_MIG_BASE,
    "nvidia.com/mig.strategy": "mixed",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.replicas": "1",
    **mig_profile("1g.10gb", 8, 9856, 1, 1),
    **mig_profile("2g.20gb", 1, 20096, 2, 2),
    **mig_profile("3g.40gb", 3, 40192, 3, 3),
}

# Under `single` a node with MIG on some GPUs only is invalid, as GFD reports it.
H100_MIG_SINGLE = {
    **H100_MIG_BASE,
    "nvidia.com/mig.strategy": "single",
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID",
    "nvidia.com/gpu.count": "0",
    "nvidia.com/gpu.memory": "0",
    "nvidia.com/gpu.replicas": "0",
}

H100_MIG_NONE = {
    **H100_MIG_BASE,
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "nvidia.com/gpu.memory": "81559",
    "nvidia.com/gpu.replicas": "1",
}

CASES = [
    ("amd-mi210x8", "none", MI210X8),
    ("amd-mi300x-spx", "none", MI300X_SPX),
    ("amd-mi300x-cpx", "none", MI300X_CPX),
    ("amd-single", "none", SINGLE_MI25),
    ("nvidia-h100x8", "none", H100X8),
    ("nvidia-h100x8-mig", "none", H100_MIG_NONE),
    ("nvidia-h100x8-mig", "single", H100_MIG_SINGLE),
    ("nvidia-h100x8-mig", "mixed", H100_MIG_MIXED),
]


def diff(actual: dict[str, str], expected: dict[str, str]) -> dict[str, tuple[str | None, str | None]]:
    keys = actual.keys() | expected.keys()
    return {k: (actual.get(k), expected.get(k)) for k in sorted(keys) if actual.get(k) != expected.get(k)}


@pytest.mark.parametrize(("profile", "strategy", "expected"), CASES, ids=lambda c: str(c)[:20])
def test_full_label_set_of_each_fixture(
    node_gpus: NodeGpus, profile: str, strategy: str, expected: dict[str, str]
) -> None:
    _, gpus = node_gpus(profile)
    labels = labels_for(gpus, LabelOptions(mig_strategy=strategy))  # type: ignore[arg-type]
    assert diff(labels, expected) == {}


def test_h100_single_strategy_with_mig_everywhere_describes_the_mig_devices(node_gpus: NodeGpus) -> None:
    _, gpus = node_gpus("nvidia-h100x8-mig")
    uniform = [g for g in gpus if g.mig_devices and {m.profile for m in g.mig_devices} == {"1g.10gb"}]
    assert len(uniform) == 1
    labels = labels_for(uniform, LabelOptions(mig_strategy="single", label_sets=("nvidia",)))
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert labels["nvidia.com/gpu.count"] == "7"
    assert labels["nvidia.com/gpu.memory"] == "9856"
    assert labels["nvidia.com/gpu.slices.gi"] == "1"
    assert labels["nvidia.com/mig.strategy"] == "single"


def test_label_sets_select_families(node_gpus: NodeGpus) -> None:
    _, gpus = node_gpus("amd-mi210x8")
    only_neutral = labels_for(gpus, LabelOptions(label_sets=("neutral",)))
    assert only_neutral == {k: v for k, v in MI210X8.items() if k.startswith("gpuop.dev/")}
    # An NVIDIA label set on an AMD node writes nothing.
    assert labels_for(gpus, LabelOptions(label_sets=("nvidia",))) == {}


def test_without_beta_and_counter_labels_only_the_plain_amd_labels_remain(node_gpus: NodeGpus) -> None:
    _, gpus = node_gpus("amd-mi210x8")
    labels = labels_for(gpus, LabelOptions(label_sets=("amd",), beta_labels=False, counter_labels=False))
    assert labels == {k: v for k, v in MI210X8.items() if k.startswith("amd.com/")}


def test_no_gpus_means_present_false_and_nothing_vendor_specific() -> None:
    assert labels_for([]) == {"gpuop.dev/gpu.count": "0", "gpuop.dev/gpu.present": "false"}


def test_sharing_labels_as_gfd_writes_them(node_gpus: NodeGpus) -> None:
    _, gpus = node_gpus("nvidia-h100x8")
    slicing = Sharing.model_validate({"timeSlicing": {"replicas": 4}})
    labels = labels_for(gpus, LabelOptions(sharing=slicing))
    assert labels["nvidia.com/gpu.replicas"] == labels["gpuop.dev/gpu.replicas"] == "4"
    assert (
        labels["nvidia.com/gpu.sharing-strategy"]
        == labels["gpuop.dev/gpu.sharing-strategy"]
        == "time-slicing"
    )
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert labels["nvidia.com/mps.capable"] == "false"
    renamed = Sharing.model_validate({"timeSlicing": {"replicas": 4, "renameByDefault": True}})
    assert (
        labels_for(gpus, LabelOptions(sharing=renamed))["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    )
    mps = labels_for(gpus, LabelOptions(sharing=Sharing.model_validate({"mps": {"replicas": 2}})))
    assert mps["nvidia.com/mps.capable"] == "true" and mps["nvidia.com/gpu.sharing-strategy"] == "mps"
    assert mps["gpuop.dev/gpu.replicas"] == "2"


def test_amd_nodes_get_the_neutral_sharing_labels(node_gpus: NodeGpus) -> None:
    _, gpus = node_gpus("amd-mi210x8")
    by_model = Sharing.model_validate({"timeSlicing": {"models": [{"models": ["MI210"], "replicas": 4}]}})
    labels = labels_for(gpus, LabelOptions(sharing=by_model))
    assert labels["gpuop.dev/gpu.replicas"] == "4"
    assert labels["gpuop.dev/gpu.sharing-strategy"] == "time-slicing"
    # MPS is NVIDIA-only: an AMD node it is configured for stays unshared.
    mps = labels_for(gpus, LabelOptions(sharing=Sharing.model_validate({"mps": {"replicas": 2}})))
    assert mps["gpuop.dev/gpu.replicas"] == "1" and mps["gpuop.dev/gpu.sharing-strategy"] == "none"


def test_time_sliced_mig_resources_get_gfds_replica_labels(node_gpus: NodeGpus) -> None:
    _, gpus = node_gpus("nvidia-h100x8-mig")
    one_profile = {"timeSlicing": {"resources": [{"name": "nvidia.com/mig-1g.10gb", "replicas": 7}]}}
    mixed = LabelOptions(
        mig_strategy="mixed", label_sets=("nvidia",), sharing=Sharing.model_validate(one_profile)
    )
    labels = labels_for(gpus, mixed)
    assert labels["nvidia.com/mig-1g.10gb.replicas"] == "7"
    assert labels["nvidia.com/mig-1g.10gb.sharing-strategy"] == "time-slicing"
    assert labels["nvidia.com/mig-1g.10gb.product"].endswith("-MIG-1g.10gb-SHARED")
    # Other profiles and the whole GPUs are not in the resources list: unshared.
    assert labels["nvidia.com/mig-3g.40gb.replicas"] == "1"
    assert labels["nvidia.com/mig-3g.40gb.sharing-strategy"] == "none"
    assert not labels["nvidia.com/mig-3g.40gb.product"].endswith("-SHARED")
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"

    uniform = [g for g in gpus if g.mig_devices and {m.profile for m in g.mig_devices} == {"1g.10gb"}]
    everything = Sharing.model_validate({"timeSlicing": {"replicas": 3, "renameByDefault": True}})
    single = labels_for(
        uniform, LabelOptions(mig_strategy="single", label_sets=("nvidia",), sharing=everything)
    )
    assert single["nvidia.com/gpu.replicas"] == "3"
    assert single["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert not single["nvidia.com/gpu.product"].endswith("-SHARED")  # renamed to nvidia.com/gpu.shared
