"""The labeller's settings: the shared agent flags plus its own (each also a `GPUOP_<NAME>` env var)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from gpuop_common.config.node_labeller import LabelSet
from gpuop_common.settings import AgentSettings
from pydantic import Field

from gpuop_node_labeller.options import MigStrategy

PROBE_PORT = 8082  # docs/charts.md: one probe port per service


class LabellerSettings(AgentSettings):
    probe_port: int = Field(
        PROBE_PORT, ge=0, le=65535, description="Port of /healthz, /readyz (0 = any free)."
    )
    interval: float = Field(
        60.0,
        gt=0,
        le=86400,
        description="Seconds between periodic resyncs; when not given, intervalSeconds of the config file.",
    )
    config_file: Path | None = Field(
        None,
        description="The mounted ConfigMap file (nodeLabeller section, camelCase YAML), reloaded on change.",
    )
    label_sets: list[LabelSet] | None = Field(
        None, description="Label families to write (amd, nvidia, neutral); default: from the config file."
    )
    mig_strategy: MigStrategy = Field(
        "none", description="How NVIDIA GFD labels describe MIG devices: none, single or mixed."
    )
    vendor: Literal["auto", "amd", "nvidia"] = Field(
        "auto", description="GPU backends to use; auto detects them from the host root."
    )
    udev: bool = Field(True, description="Relabel on udev hardware events (in addition to the resync).")
    settle_seconds: float = Field(
        1.0, ge=0, le=60, description="Quiet time after a hardware event before relabelling (bursts)."
    )
