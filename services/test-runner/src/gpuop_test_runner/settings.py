"""The test runner's settings: the shared agent flags plus its own (each also a `GPUOP_<NAME>` env var)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from gpuop_common.settings import AgentSettings
from pydantic import Field

# = gpuop_common.kubelet.podresources.POD_RESOURCES_SOCKET (a test checks), spelled out because that
# module loads gRPC at import, ~15 MiB an idle agent never needs (it asks the kubelet only before a run).
POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"

PROBE_PORT = 8084  # docs/charts.md: one probe port per service
# Where the vendors' packages install the tools (RVS, AGFHC); searched after PATH.
DEFAULT_TOOL_PATH = "/opt/rocm/bin:/opt/amd/agfhc:/usr/local/bin"


class TestRunnerSettings(AgentSettings):
    __test__ = False

    probe_port: int = Field(PROBE_PORT, ge=0, le=65535, description="Port of /healthz, /readyz, /metrics.")
    interval: float = Field(
        10.0, gt=0, le=86400, description="Seconds between reads of the node's test request."
    )
    config_file: Path | None = Field(
        None, description="The mounted ConfigMap file (testRunner settings and recipes), reloaded on change."
    )
    logs_dir: Path | None = Field(
        None, description="Directory of the per-run log files; default: logsLocation of the config file."
    )
    keep_runs: int = Field(
        20, ge=1, le=10000, description="Run logs kept (the newest); older ones are deleted."
    )
    tool_path: str = Field(DEFAULT_TOOL_PATH, description="Directories searched for test tools after PATH.")
    pod_resources_socket: Path = Field(
        Path(POD_RESOURCES_SOCKET),
        description="Kubelet pod-resources socket: unhealthy GPUs a workload holds are not tested.",
    )
    tools_namespace: str = Field(
        "",
        max_length=63,
        description="Namespace of the tools-image pods (the agent's own); empty: local tools only.",
    )
    tools_runtime_class: str = Field(
        "", max_length=253, description="runtimeClassName of the tools-image pods (NVIDIA: e.g. nvidia)."
    )
    tools_image_pull_secrets: str = Field(
        "",
        max_length=4096,
        description="Comma-separated Secrets the tools-image pods pull with (the chart's imagePullSecrets).",
    )
    vendor: Literal["auto", "amd", "nvidia"] = Field(
        "auto", description="GPU backends to use; auto detects them from the host root."
    )


class CheckSettings(TestRunnerSettings):
    """`gpuop-test-runner check`: one run, exit code 0 pass, 1 fail, 2 tool missing or bad recipe."""

    recipe: str = Field("", description="Recipe to run; default: the config file's recipe.")
    trigger: Literal["PRE_START_JOB_CHECK", "MANUAL"] = Field(
        "PRE_START_JOB_CHECK", description="Trigger recorded with the result (init container or Job)."
    )
