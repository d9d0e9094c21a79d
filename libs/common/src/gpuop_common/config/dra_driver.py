"""`draDriver`: Dynamic Resource Allocation driver, the alternative to the device plugin."""

from __future__ import annotations

from pydantic import Field

from gpuop_common.config.base import ImageSettings
from gpuop_common.config.sharing import TimeSlicingSharing


class DraDriverConfig(ImageSettings):
    """The DRA driver (ResourceSlices, CDI); mutually exclusive with the device plugin."""

    enable: bool = Field(False, description="Run the DRA driver instead of the device plugin.")
    sharing: TimeSlicingSharing = Field(
        default_factory=TimeSlicingSharing,
        description="Time-sliced devices (published `replicas` times each); one ResourceClaim shared "
        "by several pods needs no setting here.",
    )
