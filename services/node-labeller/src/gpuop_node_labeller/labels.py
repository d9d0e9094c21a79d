"""`labels_for(gpus, options)`: the complete label set the labeller owns for a node (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from gpuop_common.gpu.models import GpuDevice

from gpuop_node_labeller.amd_labels import amd_labels
from gpuop_node_labeller.facts import checked
from gpuop_node_labeller.neutral_labels import neutral_labels
from gpuop_node_labeller.nvidia_labels import nvidia_labels
from gpuop_node_labeller.options import LabelOptions, MigStrategy
from gpuop_node_labeller.sanitize import is_valid_value

__all__ = ["LabelOptions", "MigStrategy", "labels_for"]


def labels_for(gpus: Sequence[GpuDevice], options: LabelOptions | None = None) -> dict[str, str]:
    """Every label this node should carry from us, sorted by key; values are valid label values.

    The vendor sets only describe GPUs of their vendor, so a mixed node gets both; the neutral set
    describes all GPUs.
    """
    chosen = options or LabelOptions()
    ordered = [checked(g) for g in sorted(gpus, key=lambda g: (g.vendor.value, g.index))]
    labels: dict[str, str] = {}
    if "amd" in chosen.label_sets:
        labels |= amd_labels(ordered, chosen)
    if "nvidia" in chosen.label_sets:
        labels |= nvidia_labels(ordered, chosen)
    if "neutral" in chosen.label_sets:
        labels |= neutral_labels(ordered, chosen.sharing)
    # Every producer sanitises; this is the last line of defence against a value the API would reject.
    return {key: labels[key] for key in sorted(labels) if is_valid_value(labels[key])}
