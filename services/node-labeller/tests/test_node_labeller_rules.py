"""Label rules on edited GPU lists: several values per kind, mixed vendors, label syntax limits."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from gpuop_common.gpu import GpuDevice
from gpuop_node_labeller import LabelOptions, labels_for
from gpuop_node_labeller.sanitize import is_valid_key, is_valid_value, sanitise, value_or_none
from gpuop_sim.nodes import NodeRootInfo

NodeGpus = Callable[..., tuple[NodeRootInfo, list[GpuDevice]]]
AMD_ONLY = LabelOptions(label_sets=("amd",))


def test_several_values_of_a_kind_become_counters_on_both_prefixes(node_gpus: NodeGpus) -> None:
    _, gpus = node_gpus("amd-mi210x8")
    edited = [dataclasses.replace(g, product_name="Instinct MI210 (rev B)") for g in gpus[:3]] + gpus[3:]
    labels = labels_for(edited, AMD_ONLY)
    assert "amd.com/gpu.product-name" not in labels
    assert "beta.amd.com/gpu.product-name" not in labels
    assert labels["amd.com/gpu.product-name.Instinct_MI210"] == "5"
    assert labels["amd.com/gpu.product-name.Instinct_MI210_rev_B"] == "3"
    assert labels["beta.amd.com/gpu.product-name.Instinct_MI210"] == "5"
    assert labels["beta.amd.com/gpu.product-name.Instinct_MI210_rev_B"] == "3"
    # Without counters a kind with several values has no label at all.
    quiet = labels_for(edited, LabelOptions(label_sets=("amd",), counter_labels=False))
    assert not [k for k in quiet if "product-name" in k]


def test_partition_label_only_for_homogeneous_nodes(node_gpus: NodeGpus) -> None:
    _, gpus = node_gpus("amd-mi300x-spx")
    assert gpus[0].partition is not None
    cpx = dataclasses.replace(gpus[0], partition=dataclasses.replace(gpus[0].partition, compute="CPX"))
    labels = labels_for([cpx, *gpus[1:]])
    assert "amd.com/gpu.compute-memory-partition" not in labels
    assert labels["gpuop.dev/gpu.partition.compute"] == "mixed"
    assert labels["gpuop.dev/gpu.partition.memory"] == "nps1"


def test_mixed_vendor_node_gets_both_vendor_sets_and_mixed_neutral_values(node_gpus: NodeGpus) -> None:
    _, amd = node_gpus("amd-single", "mixed-node")
    _, nvidia = node_gpus("nvidia-h100x8", "mixed-node")
    labels = labels_for([*amd, *nvidia[:2]])
    assert labels["amd.com/gpu.product-name"] == "AMD_Radeon_Instinct_MI25"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["beta.amd.com/gpu.family.AI"] == "1"
    assert labels["gpuop.dev/gpu.vendor"] == "mixed"
    assert labels["gpuop.dev/gpu.model"] == "mixed"
    assert labels["gpuop.dev/gpu.count"] == "3"
    assert labels["gpuop.dev/gpu.memory-mib"] == "16368"  # the smallest GPU


def test_product_names_are_sanitised_into_valid_values_and_keys(node_gpus: NodeGpus) -> None:
    _, gpus = node_gpus("amd-single")
    long_name = "AMD Instinct MI250X/MI250 (OAM) " + "extra words " * 8
    labels = labels_for([dataclasses.replace(gpus[0], product_name=long_name)], AMD_ONLY)
    value = labels["amd.com/gpu.product-name"]
    assert value.startswith("AMD_Instinct_MI250XMI250_OAM_extra_words")
    assert len(value) <= 63
    assert is_valid_value(value)
    counter = [k for k in labels if k.startswith("beta.amd.com/gpu.product-name.")]
    assert len(counter) == 1
    assert is_valid_key(counter[0])
    assert all(is_valid_key(k) and is_valid_value(v) for k, v in labels.items())


def test_sanitise_follows_the_anchors() -> None:
    assert sanitise("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert sanitise("Instinct MI300X (OAM)", "_") == "Instinct_MI300X_OAM"
    assert sanitise("  --(weird)--  ") == "weird"
    assert value_or_none("6.8.5-2009582.22.04") == "6.8.5-2009582.22.04"
    assert value_or_none("???") is None
    assert value_or_none(None) is None


def test_unknown_values_leave_only_their_label_out(node_gpus: NodeGpus) -> None:
    _, gpus = node_gpus("amd-mi210x8")
    edited = [dataclasses.replace(gpus[0], compute_units=None, simd_count=None), *gpus[1:]]
    labels = labels_for(edited, AMD_ONLY)
    # The other 7 GPUs still count; the unreadable one is not guessed.
    assert labels["beta.amd.com/gpu.cu-count.104"] == "7"
    assert labels["beta.amd.com/gpu.simd-count.416"] == "7"
    assert labels["beta.amd.com/gpu.vram.64G"] == "8"
    neutral = labels_for([dataclasses.replace(gpus[0], vram_total_bytes=None), *gpus[1:]])
    assert "gpuop.dev/gpu.memory-mib" not in neutral
    assert neutral["gpuop.dev/gpu.count"] == "8"
