"""Kubernetes label-selector matching over the shared `LabelSelector` model (pure)."""

from __future__ import annotations

from collections.abc import Mapping

from gpuop_common.config import LabelSelector, LabelSelectorRequirement


def _requirement_holds(req: LabelSelectorRequirement, labels: Mapping[str, str]) -> bool:
    present = req.key in labels
    if req.operator == "Exists":
        return present
    if req.operator == "DoesNotExist":
        return not present
    if req.operator == "In":
        return present and labels[req.key] in req.values
    # NotIn matches nodes without the key too, as in Kubernetes.
    return not present or labels[req.key] not in req.values


def matches(selector: LabelSelector, labels: Mapping[str, str]) -> bool:
    """True when every matchLabels entry and every matchExpressions requirement holds."""
    if any(labels.get(key) != value for key, value in selector.match_labels.items()):
        return False
    return all(_requirement_holds(req, labels) for req in selector.match_expressions)
