"""The config manager's settings: the shared agent flags plus its own (each also a `GPUOP_<NAME>` env var)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from gpuop_common.settings import AgentSettings
from pydantic import Field

PROBE_PORT = 8083  # docs/charts.md: one probe port per service


class ConfigManagerSettings(AgentSettings):
    probe_port: int = Field(PROBE_PORT, ge=0, le=65535, description="Port of /healthz, /readyz, /metrics.")
    interval: float = Field(
        15.0, gt=0, le=86400, description="Seconds between checks of the node's profile label and GPUs."
    )
    config_file: Path | None = Field(
        None, description="The mounted ConfigMap file (configManager section, camelCase YAML), reloaded."
    )
    vendor: Literal["auto", "amd", "nvidia"] = Field("auto", description="GPU backends to use.")
    poll_seconds: float = Field(
        2.0, gt=0, le=60, description="Seconds between checks while waiting for pods to leave the node."
    )
    evict_gpu_pods: bool = Field(
        False, description="Delete GPU workload pods on the node instead of waiting for them to finish."
    )
    driver_reload: bool = Field(
        True,
        description="Reload amdgpu (GPUs quiesced) when a memory partition change waits for it; "
        "off: such a change fails, saying so.",
    )
    partition_tool: Literal["auto", "sysfs", "amd-smi"] = Field(
        "auto",
        description="How AMD partitions are written: `amd-smi set` on the host (through --host-exec), "
        "the sysfs attributes, or `auto`: amd-smi when it runs on the host, else sysfs.",
    )
    host_exec: str = Field(
        "chroot /host",
        min_length=1,
        description="Prefix of the host commands (`modprobe` of a driver reload, `amd-smi`); "
        "`{host_root}` is replaced by --host-root.",
    )
