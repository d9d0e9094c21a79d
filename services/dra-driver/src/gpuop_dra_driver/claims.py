"""A ResourceClaim's allocation -> this driver's devices on this node (pure).

A claim fails on its own, with a message naming it, when it is not the claim the kubelet meant
(uid differs), is not allocated, has no result for this driver, or names a device of another pool
(another node) or one this node does not have (any more).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpuop_dra_driver.devices import DraDevice


class ClaimError(ValueError):
    """This claim cannot be prepared; the message is what the kubelet shows in the pod's events."""


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str
    pool: str
    device: DraDevice


def allocated_devices(
    claim: Mapping[str, Any], *, uid: str, driver: str, pool: str, devices: Mapping[str, DraDevice]
) -> list[AllocatedDevice]:
    meta = claim.get("metadata") or {}
    ref = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    if meta.get("uid") != uid:
        raise ClaimError(f"ResourceClaim {ref} has uid {meta.get('uid')!r}, the kubelet asked for {uid!r}")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"ResourceClaim {ref} is not allocated")
    results = ((allocation.get("devices") or {}).get("results")) or []
    ours = [r for r in results if r.get("driver") == driver]
    if not ours:
        drivers = sorted({str(r.get("driver")) for r in results})
        listed = ", ".join(drivers) or "none"
        raise ClaimError(
            f"ResourceClaim {ref} has no device of driver {driver} (allocated drivers: {listed})"
        )
    out: list[AllocatedDevice] = []
    problems: list[str] = []
    for result in ours:
        name, result_pool = str(result.get("device", "")), str(result.get("pool", ""))
        if result_pool != pool:
            problems.append(
                f"device {result_pool}/{name} is in pool {result_pool!r}, not this node's {pool!r}"
            )
            continue
        device = devices.get(name)
        if device is None:
            problems.append(f"device {name} is not (or no longer) present and healthy on node {pool}")
            continue
        out.append(AllocatedDevice(str(result.get("request", "")), result_pool, device))
    if problems:
        raise ClaimError(f"ResourceClaim {ref}: {'; '.join(problems)}")
    return out
