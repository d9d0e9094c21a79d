"""Command-line flags and `GPUOP_*` env vars of the exporter (on top of the common agent flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from gpuop_common.kubelet import podresources as pr
from gpuop_common.settings import AgentSettings
from pydantic import Field, model_validator
from pydantic_settings import CliSuppress

DEFAULT_PORT = 5000  # the AMD exporter's; dcgm-exporter users pick 9400
DEFAULT_CONFIG_FILE = Path("/etc/gpuop/config.yaml")


class ExporterSettings(AgentSettings):
    port: int = Field(
        DEFAULT_PORT, ge=0, le=65535, description="Port of /metrics, /healthz, /readyz and /health (0 = any)."
    )
    pod_resources_socket: Path = Field(
        Path(pr.POD_RESOURCES_SOCKET), description="Kubelet pod-resources socket, for pod labels."
    )
    config_file: Path = Field(
        DEFAULT_CONFIG_FILE,
        description="The metricsExporter ConfigMap file (MetricsExporterConfig), hot-reloaded.",
    )
    config_poll_interval: float = Field(5.0, gt=0, description="Seconds between checks of --config-file.")
    interval: float = Field(
        15.0,
        gt=0,
        le=3600,
        description="Seconds between collections; default: the config file's collectionIntervalSeconds.",
    )

    @property
    def interval_override(self) -> float | None:
        """--interval when it was given (flag, env or settings file), else None."""
        return self.interval if "interval" in self.model_fields_set else None

    vendor: Literal["auto", "amd", "nvidia"] = Field(
        "auto", description="GPU vendor to read; auto opens every vendor found under --host-root."
    )
    # One listener serves /metrics and the probes on --port (what the chart's probes and Service
    # use), so the inherited --probe-port is hidden from --help and refused when given.
    probe_port: CliSuppress[int] = Field(0, ge=0, le=65535)

    @model_validator(mode="after")
    def _no_probe_port(self) -> ExporterSettings:
        if "probe_port" in self.model_fields_set:
            raise ValueError("--probe-port is not an exporter setting: --port serves /metrics and the probes")
        return self

    @property
    def listen_port(self) -> int:
        """The port of the one listener; `--once` prints and exits, so it must not take the daemon's."""
        return 0 if self.once else self.port
