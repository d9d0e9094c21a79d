"""Node metadata one gpuop service writes and another must read (names only, and how to parse them).

The node labeller records the labels it owns in `LABELLER_OWNED_ANNOTATION` (comma-separated keys)
so that its next pod, and the operator's uninstall cleanup, remove exactly what it wrote.
"""

from __future__ import annotations

from collections.abc import Mapping

LABELLER_OWNED_ANNOTATION = "gpuop.dev/node-labeller.owned-labels"


def labeller_owned_keys(annotations: Mapping[str, str] | None) -> list[str]:
    """The keys listed in the labeller's ownership annotation (unvalidated, in order)."""
    raw = (annotations or {}).get(LABELLER_OWNED_ANNOTATION, "")
    return [part.strip() for part in raw.split(",") if part.strip()]
