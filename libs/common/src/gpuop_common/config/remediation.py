"""`remediation`: automatic repair of nodes with broken GPUs (taint, drain, playbook, validate)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from gpuop_common.config.base import ConfigModel, LabelKey, LabelValue
from gpuop_common.config.driver import DrainPolicy


class Taint(ConfigModel):
    """The taint put on a node while it is remediated."""

    key: LabelKey = Field("gpuop.dev/gpu-unhealthy", description="Taint key.")
    value: LabelValue = Field("", description="Taint value; empty uses the failing condition's name.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = Field(
        "NoSchedule", description="Taint effect."
    )


class RateLimit(ConfigModel):
    """Per-node cap on remediation runs, so a flapping GPU does not reboot a node forever."""

    max_runs_per_window: int = Field(3, ge=1, le=1000, description="Remediation runs allowed per window.")
    window_seconds: int = Field(18000, ge=60, le=2_592_000, description="Length of the window in seconds.")


# A Node condition type: a qualified name (`KernelDeadlock`, `example.com/GpuXid`).
ConditionType = Annotated[
    str,
    Field(
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
        max_length=316,
    ),
]


class ConditionTrigger(ConfigModel):
    """A Node condition that starts a remediation while it has `status` (node-problem-detector's
    conditions are True when the problem is there)."""

    type: ConditionType = Field(description="Node condition type, e.g. KernelDeadlock.")
    status: Literal["True", "False", "Unknown"] = Field("True", description="Status that means broken.")


class RemediationConfig(ConfigModel):
    """Automatic node remediation run by the operator."""

    enable: bool = Field(False, description="Remediate nodes whose GPUs turn unhealthy.")
    taint: Taint = Field(default_factory=Taint, description="Taint applied during remediation.")
    max_parallel: int = Field(
        1, ge=0, le=10000, description="Nodes remediated at the same time; 0 means no limit."
    )
    rate_limit: RateLimit = Field(default_factory=RateLimit, description="Per-node run limit.")
    playbook: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$", max_length=253)] = Field(
        "gpu-reset",
        description="Repair playbook: the built-in gpu-reset, or a key <name>.yml of the playbook "
        "override ConfigMap (same extra vars and result contract).",
    )
    node_drain_policy: DrainPolicy = Field(default_factory=DrainPolicy, description="Drain before repair.")
    auto_start: bool = Field(True, description="Start without waiting for an approval label on the node.")
    reboot_timeout_seconds: int = Field(
        900, ge=60, le=86400, description="Fail the run when the node is not back this long after reboot."
    )
    validate_after: bool = Field(True, description="Run the GPU validation test before untainting.")
    conditions: list[ConditionTrigger] = Field(
        default_factory=list,
        max_length=32,
        description="Node conditions that start a remediation besides GPUHealthy=False (the labeller's).",
    )
    condition_hold_seconds: int = Field(
        60, ge=0, le=86400, description="A trigger condition must hold this long (lastTransitionTime)."
    )
    reset_clear_seconds: int = Field(
        120,
        ge=0,
        le=3600,
        description="After a successful reset, wait this long for the condition to clear before rebooting.",
    )
    reboot_on_reset_failure: bool = Field(
        True,
        description="A reset the playbook could not do (the driver refused it) reboots the node; "
        "false: the run fails with the tool's message.",
    )
    history_limit: int = Field(
        5, ge=0, le=50, description="Finished runs per node kept in DeviceConfig status.remediation."
    )
