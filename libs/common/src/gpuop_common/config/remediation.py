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


class RemediationConfig(ConfigModel):
    """Automatic node remediation run by the operator."""

    enable: bool = Field(False, description="Remediate nodes whose GPUs turn unhealthy.")
    taint: Taint = Field(default_factory=Taint, description="Taint applied during remediation.")
    max_parallel: int = Field(
        1, ge=0, le=10000, description="Nodes remediated at the same time; 0 means no limit."
    )
    rate_limit: RateLimit = Field(default_factory=RateLimit, description="Per-node run limit.")
    playbook: Annotated[str, Field(pattern=r"^[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$", max_length=253)] = Field(
        "remediation", description="Playbook to run: built-in name or the ConfigMap overriding it."
    )
    node_drain_policy: DrainPolicy = Field(default_factory=DrainPolicy, description="Drain before repair.")
    auto_start: bool = Field(True, description="Start without waiting for an approval label on the node.")
    reboot_timeout_seconds: int = Field(
        900, ge=60, le=86400, description="Fail the run when the node is not back this long after reboot."
    )
    validate_after: bool = Field(True, description="Run the GPU validation test before untainting.")
