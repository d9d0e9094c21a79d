"""The `GPUHealthy` Node condition: the backends' GPU health (gpuop_common.gpu) as one condition.

The operator's remediation starts on `GPUHealthy=False`. Format (docs/node-labeller.md):
- False: reason = the health reason codes of every unhealthy GPU, CamelCase, sorted, comma-joined
  (`KfdNodeVanished,RasUncorrectableIncrease`); message = `N of M GPUs unhealthy: ` then per GPU
  `<PCI address>: <why>[, <why>]` joined by `; `.
- True: reason `GPUsHealthy`, message `all M GPUs healthy`.
- Unknown: reason `GPUHealthUnreadable` when a backend's health read failed (the error is the message).

The condition is written through `nodes/status` as a strategic-merge patch of this one condition
(`conditions` merge by `type`), and only when status, reason or message change: lastTransitionTime
moves only when the status does, lastHeartbeatTime is the time of the write.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gpuop_common.gpu import GpuHealth
from gpuop_common.nodemeta import GPU_HEALTHY_CONDITION

CONDITION_TYPE = GPU_HEALTHY_CONDITION
HEALTHY_REASON = "GPUsHealthy"
UNREADABLE_REASON = "GPUHealthUnreadable"
# metav1.Condition's reason rule (Node conditions have none; we keep to the stricter one).
REASON_PATTERN = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
MAX_REASON = 1024
MAX_MESSAGE = 2048  # `kubectl describe node` stays readable; the rest is counted, not listed


@dataclass(frozen=True, slots=True)
class GpuCondition:
    status: str  # "True", "False", "Unknown"
    reason: str
    message: str
    unhealthy: tuple[str, ...] = ()  # PCI addresses (or ids where unknown) of the unhealthy GPUs


def reason_word(code: str) -> str:
    """`ras_uncorrectable_increase` -> `RasUncorrectableIncrease`; anything not [A-Za-z0-9] splits words.
    A code that starts with a digit gets a `Gpu` prefix, an empty one is `Unknown`."""
    word = "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", code) if part)
    if not word:
        return "Unknown"
    return word if word[0].isalpha() else f"Gpu{word}"


def _reasons_of(health: GpuHealth) -> list[tuple[str, str]]:
    """(code, message) of the GPU and of its partitions (MIG devices, AMD compute partitions)."""
    found = [(r.code, r.message) for r in health.reasons]
    for part in health.partitions:
        found.extend((r.code, f"partition {part.id}: {r.message}") for r in part.reasons)
    return found


def _join_reasons(codes: Iterable[str]) -> str:
    words = sorted({reason_word(code) for code in codes})
    reason = ""
    for word in words:
        candidate = f"{reason},{word}" if reason else word
        if len(candidate) > MAX_REASON:
            break
        reason = candidate
    return reason


def _limit(parts: list[str], head: str) -> str:
    message = head
    for index, part in enumerate(parts):
        candidate = f"{message}{'; ' if index else ''}{part}"
        if len(candidate) > MAX_MESSAGE - 40:
            return f"{message}; (+{len(parts) - index} more)"
        message = candidate
    return message


def gpu_condition(health: Iterable[GpuHealth], pci_of: Mapping[str, str]) -> GpuCondition:
    """The condition for these health reports; `pci_of` maps a backend's GPU id to its PCI address."""
    reports = list(health)
    bad = [(h, _reasons_of(h)) for h in reports]
    bad = [(h, reasons) for h, reasons in bad if reasons]
    total = len(reports)
    if not bad:
        return GpuCondition("True", HEALTHY_REASON, f"all {total} GPUs healthy")
    named = sorted((pci_of.get(h.gpu_id, h.gpu_id), reasons) for h, reasons in bad)
    parts = [f"{gpu}: {', '.join(message for _, message in reasons)}" for gpu, reasons in named]
    reason = _join_reasons(code for _, reasons in named for code, _ in reasons)
    message = _limit(parts, f"{len(named)} of {total} GPUs unhealthy: ")
    return GpuCondition("False", reason, message, tuple(gpu for gpu, _ in named))


def unreadable_condition(error: str) -> GpuCondition:
    return GpuCondition("Unknown", UNREADABLE_REASON, f"GPU health could not be read: {error}"[:MAX_MESSAGE])


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def current_condition(node: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == CONDITION_TYPE:
            return condition
    return None


def condition_patch(node: Mapping[str, Any], wanted: GpuCondition, now: str) -> dict[str, Any] | None:
    """Strategic-merge patch for `nodes/status` that sets only our condition, or None if it is current."""
    current = current_condition(node)
    if current is not None and (
        current.get("status"),
        current.get("reason"),
        current.get("message"),
    ) == (wanted.status, wanted.reason, wanted.message):
        return None
    same_status = current is not None and current.get("status") == wanted.status
    transition = str(current.get("lastTransitionTime") or now) if current is not None and same_status else now
    condition = {
        "type": CONDITION_TYPE,
        "status": wanted.status,
        "reason": wanted.reason,
        "message": wanted.message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": transition,
    }
    return {"status": {"conditions": [condition]}}
