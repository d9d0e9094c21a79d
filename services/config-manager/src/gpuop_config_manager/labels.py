"""Node labels and annotations the config manager reads and writes (pure functions over dicts).

Input: `gpuop.dev/gpu-config-profile=<name>` (and the vendor labels AMD's device config manager and
NVIDIA's MIG manager read). Output: `gpuop.dev/gpu-config-state` plus the vendor state labels
(`nvidia.com/mig.config.state` pending/success/failed; `dcm.amd.com/gpu-config-profile-state`
success/failure), the failure reason in an annotation, and while GPUs are repartitioned the
operands' deploy labels set to `paused-for-config-change` (gpuop_common.operandpause, the pause
the operator's driver upgrade and remediation use too).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuop_common.config.config_manager import ConfigManagerConfig, PartitionProfile
from gpuop_common.gpu.models import Vendor
from gpuop_common.nodemeta import (
    CONFIG_AMD_STATE_LABEL,
    CONFIG_FAILURE_ANNOTATION,
    CONFIG_NVIDIA_STATE_LABEL,
    CONFIG_PROGRESS_ANNOTATION,
    CONFIG_RESULT_ANNOTATION,
    CONFIG_STATE_LABEL,
)
from gpuop_common.operandpause import CONFIG_CHANGE_PAUSE

STATE_LABEL = CONFIG_STATE_LABEL
NVIDIA_STATE_LABEL = CONFIG_NVIDIA_STATE_LABEL
AMD_STATE_LABEL = CONFIG_AMD_STATE_LABEL
REASON_ANNOTATION = CONFIG_FAILURE_ANNOTATION
PROGRESS_ANNOTATION = CONFIG_PROGRESS_ANNOTATION
RESULT_ANNOTATION = CONFIG_RESULT_ANNOTATION
PAUSE = CONFIG_CHANGE_PAUSE  # the operands paused while the GPUs are repartitioned
PAUSED = PAUSE.value
REASON_LIMIT = 1024


class State(StrEnum):
    PENDING = "pending"
    QUIESCING = "quiescing"
    APPLYING = "applying"
    SUCCESS = "success"
    FAILED = "failed"


_NVIDIA_STATE = {State.SUCCESS: "success", State.FAILED: "failed"}  # other states: pending
_AMD_STATE = {State.SUCCESS: "success", State.FAILED: "failure"}  # DCM writes only these two


@dataclass(frozen=True, slots=True)
class Selection:
    """Which profile a node asks for and through which label (None: the node asks for none)."""

    name: str | None
    source: str  # the label key, `nodeSelector`, or "" when nothing selects a profile


def select_profile(labels: Mapping[str, str], config: ConfigManagerConfig) -> Selection:
    """The gpuop label wins, then the vendor labels in order, then the first nodeSelector match."""
    for key in (config.profile_label, *config.vendor_profile_labels):
        value = labels.get(key, "").strip()
        if value:
            return Selection(value, key)
    for profile in config.profiles:
        if profile.node_selector and all(labels.get(k) == v for k, v in profile.node_selector.items()):
            return Selection(profile.name, "nodeSelector")
    return Selection(None, "")


def profile_digest(profile: PartitionProfile) -> str:
    """Short content hash: a changed profile of the same name is a new request."""
    body = json.dumps(profile.model_dump(mode="json", by_alias=True), sort_keys=True).encode()
    return hashlib.sha256(body).hexdigest()[:16]


def state_labels(state: State, vendors: Sequence[Vendor]) -> dict[str, str | None]:
    """The gpuop state label and, for the vendors on the node, the vendor-compatible ones."""
    labels: dict[str, str | None] = {STATE_LABEL: state.value}
    if Vendor.NVIDIA in vendors:
        labels[NVIDIA_STATE_LABEL] = _NVIDIA_STATE.get(state, "pending")
    if Vendor.AMD in vendors and state in _AMD_STATE:
        labels[AMD_STATE_LABEL] = _AMD_STATE[state]
    return labels


def clip_reason(reason: str) -> str:
    return reason if len(reason) <= REASON_LIMIT else reason[: REASON_LIMIT - 3] + "..."
