"""Which labels the labeller owns, and the one merge patch that brings a Node to the wanted set (pure).

Ownership is remembered on the Node itself, in the annotation `gpuop.dev/node-labeller.owned-labels`
(comma-separated keys), so it survives agent restarts and a new pod removes what an old one wrote.
A label we wrote earlier and no longer compute is removed; a label we never wrote is never touched,
even under one of our prefixes (another tool, or an administrator, may own it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuop_common.nodemeta import LABELLER_OWNED_ANNOTATION, labeller_owned_keys

from gpuop_node_labeller.sanitize import is_valid_key

log = logging.getLogger(__name__)

OWNED_ANNOTATION = LABELLER_OWNED_ANNOTATION


def parse_owned(annotations: Mapping[str, str] | None) -> frozenset[str]:
    """Keys listed in the ownership annotation; an unreadable value owns nothing (and is logged)."""
    keys = labeller_owned_keys(annotations)
    bad = [key for key in keys if not is_valid_key(key)]
    if bad:
        log.warning(
            "ignoring malformed entries of the ownership annotation",
            extra={"annotation": OWNED_ANNOTATION, "entries": bad},
        )
    return frozenset(key for key in keys if key not in bad)


def format_owned(keys: frozenset[str] | set[str]) -> str | None:
    return ",".join(sorted(keys)) or None


@dataclass(frozen=True)
class LabelPlan:
    """What one pass changes: `set` (added or new value), `removed`, and the ownership update."""

    set: dict[str, str] = field(default_factory=dict)
    removed: tuple[str, ...] = ()
    previous: dict[str, str] = field(default_factory=dict)  # old values of changed/removed keys
    owned: str | None = None
    owned_changed: bool = False

    @property
    def empty(self) -> bool:
        return not self.set and not self.removed and not self.owned_changed

    def patch(self, resource_version: str | None = None) -> dict[str, Any]:
        """The JSON merge patch: only changed keys (None deletes), optionally guarded by resourceVersion."""
        labels: dict[str, str | None] = {**self.set, **dict.fromkeys(self.removed)}
        metadata: dict[str, Any] = {}
        if labels:
            metadata["labels"] = labels
        if self.owned_changed:
            metadata["annotations"] = {OWNED_ANNOTATION: self.owned}
        if resource_version:
            # A stale read then fails with 409 instead of undoing someone else's concurrent change.
            metadata["resourceVersion"] = resource_version
        return {"metadata": metadata}


def plan_labels(
    current: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None,
    desired: Mapping[str, str],
) -> LabelPlan:
    """The change from the node's labels to `desired`, removing only what the annotation says is ours."""
    labels = dict(current or {})
    owned = parse_owned(annotations)
    to_set = {k: v for k, v in desired.items() if labels.get(k) != v}
    removed = tuple(sorted(k for k in owned - desired.keys() if k in labels))
    previous = {k: labels[k] for k in (*to_set, *removed) if k in labels}
    new_owned = format_owned(set(desired))
    old_owned = (annotations or {}).get(OWNED_ANNOTATION)
    return LabelPlan(
        set=dict(sorted(to_set.items())),
        removed=removed,
        previous=previous,
        owned=new_owned,
        owned_changed=new_owned != old_owned,
    )


def describe(plan: LabelPlan) -> list[str]:
    """Human-readable diff lines (`+ key=value`, `~ key=old -> new`, `- key=old`) for --dry-run."""
    lines = []
    for key, value in plan.set.items():
        if key in plan.previous:
            lines.append(f"~ {key}={plan.previous[key]} -> {value}")
        else:
            lines.append(f"+ {key}={value}")
    lines.extend(f"- {key}={plan.previous.get(key, '')}" for key in plan.removed)
    return lines
