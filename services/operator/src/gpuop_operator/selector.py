"""Kubernetes label-selector matching over the shared `LabelSelector` model (pure).

The rule itself lives on `gpuop_common.config.LabelSelector`, so `kubectl gpuop doctor` decides which
DeviceConfig selects a node exactly as the operator does.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuop_common.config import LabelSelector


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """True when every matchLabels entry and every matchExpressions requirement holds."""
    return selector.matches(labels)
