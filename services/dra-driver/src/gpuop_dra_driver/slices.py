"""ResourceSlices of one node's pool (pure): the desired objects and the diff against the server's.

One pool per node, named after the node; a pool larger than the API's 128-device limit is split
over several slices that all carry the pool's generation and `resourceSliceCount`. Each slice
carries a hash of what we meant to publish (an annotation): the server canonicalizes quantities,
so comparing our desired spec with the stored one would see a change on every pass.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpuop_dra_driver.devices import DraDevice

MAX_DEVICES_PER_SLICE = 128
CONTENT_ANNOTATION = "gpu.gpuop.dev/content-hash"
JsonObj = dict[str, Any]


def slice_name(node: str, driver: str, index: int) -> str:
    return f"{node}-{driver}-{index}"


def chunks(devices: Sequence[DraDevice], size: int = MAX_DEVICES_PER_SLICE) -> list[list[DraDevice]]:
    """The devices split into slices; an empty pool is one empty slice (it says "no devices")."""
    if not devices:
        return [[]]
    return [list(devices[i : i + size]) for i in range(0, len(devices), size)]


def content_hash(node: str, devices: Sequence[JsonObj]) -> str:
    text = json.dumps({"node": node, "devices": devices}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def desired_slices(
    node: str, driver: str, devices: Sequence[DraDevice], generation: int, owner: JsonObj | None = None
) -> list[JsonObj]:
    """The pool's slices at this generation; `owner` (the Node) garbage-collects them with it."""
    parts = chunks(devices)
    out = []
    for index, part in enumerate(parts):
        entries = [device.slice_entry() for device in part]
        metadata: JsonObj = {
            "name": slice_name(node, driver, index),
            "annotations": {CONTENT_ANNOTATION: content_hash(node, entries)},
        }
        if owner:
            metadata["ownerReferences"] = [owner]
        out.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": metadata,
                "spec": {
                    "driver": driver,
                    "nodeName": node,
                    "pool": {"name": node, "generation": generation, "resourceSliceCount": len(parts)},
                    "devices": entries,
                },
            }
        )
    return out


@dataclass(frozen=True)
class SlicePlan:
    """What to send: slices to create, to replace (with the stored resourceVersion), to delete."""

    generation: int
    create: tuple[JsonObj, ...] = ()
    update: tuple[JsonObj, ...] = ()
    delete: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.create or self.update or self.delete)


def _hash(obj: JsonObj) -> str | None:
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(CONTENT_ANNOTATION)
    return value if isinstance(value, str) else None


def _pool(obj: JsonObj) -> JsonObj:
    return ((obj.get("spec") or {}).get("pool")) or {}


def plan_slices(
    node: str,
    driver: str,
    devices: Sequence[DraDevice],
    existing: Sequence[JsonObj],
    owner: JsonObj | None = None,
) -> SlicePlan:
    """Bring `existing` (this node's slices of this driver, as listed) to the desired pool.

    Unchanged content keeps the generation and sends nothing; any change bumps the generation past
    every stored one (the first publish is generation 1) and rewrites all slices of the pool, so
    consumers never mix slices of two generations.
    """
    stored = {(obj.get("metadata") or {}).get("name", ""): obj for obj in existing}
    current = max((int(_pool(obj).get("generation") or 0) for obj in existing), default=0)
    same = desired_slices(node, driver, devices, current, owner)
    names = {obj["metadata"]["name"] for obj in same}
    unchanged = (
        set(stored) == names
        and all(_hash(stored[o["metadata"]["name"]]) == _hash(o) for o in same)
        and all(
            int(_pool(obj).get("generation") or 0) == current
            and int(_pool(obj).get("resourceSliceCount") or 0) == len(same)
            for obj in existing
        )
    )
    if unchanged:
        return SlicePlan(generation=current)
    generation = current + 1
    desired = desired_slices(node, driver, devices, generation, owner)
    create, update = [], []
    for obj in desired:
        old = stored.get(obj["metadata"]["name"])
        if old is None:
            create.append(obj)
        else:
            obj["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion", "")
            update.append(obj)
    delete = sorted(set(stored) - {o["metadata"]["name"] for o in desired})
    return SlicePlan(generation, tuple(create), tuple(update), tuple(delete))
