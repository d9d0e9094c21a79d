"""`nodeLabeller`: which GPU node labels are written, and how often they are refreshed."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpuop_common.config.base import ImageSettings
from gpuop_common.config.sharing import Sharing

LabelSet = Literal["amd", "nvidia", "neutral"]
ALL_LABEL_SETS: tuple[LabelSet, ...] = ("amd", "nvidia", "neutral")


class NodeLabellerConfig(ImageSettings):
    """The node labeller agent."""

    enable: bool = Field(True, description="Run the node labeller on selected nodes.")
    label_sets: list[LabelSet] = Field(
        default_factory=lambda: list(ALL_LABEL_SETS),
        max_length=3,
        description="Label families to write: amd.com/ (AMD labeller), nvidia.com/ (GFD), gpuop.dev/.",
    )
    counter_labels: bool = Field(
        True, description="Also write per-value counter labels (`amd.com/gpu.<kind>.<value>=<count>`)."
    )
    beta_labels: bool = Field(
        True, description="Also write the beta.amd.com/ copies the AMD labeller writes."
    )
    interval_seconds: int = Field(60, ge=5, le=86400, description="Seconds between label refreshes.")
    sharing: Sharing = Field(
        default_factory=Sharing,
        description="The sharing the device plugin (or DRA driver) applies, for the replica labels; "
        "in a DeviceConfig it defaults to devicePlugin.sharing (draDriver.sharing when that runs).",
    )
