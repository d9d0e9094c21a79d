"""`testRunner`: GPU validation runs (named testrunner.py so pytest never collects it as a test)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from gpuop_common.config.base import AbsolutePath, ImageSettings


class TestRunnerConfig(ImageSettings):
    """GPU validation tests; results become Events, node labels and logs."""

    __test__ = False  # a model, not a pytest test class

    enable: bool = Field(False, description="Run the test runner on selected nodes.")
    trigger: Literal["AUTO_UNHEALTHY_GPU_WATCH", "PRE_START_JOB_CHECK", "MANUAL"] = Field(
        "AUTO_UNHEALTHY_GPU_WATCH",
        description="When tests run: on idle unhealthy GPUs, before a job starts, or on demand.",
    )
    framework: Literal["RVS", "AGFHC", "DCGM"] = Field(
        "RVS", description="Test suite: ROCm Validation Suite, AMD AGFHC, or NVIDIA DCGM diagnostics."
    )
    recipe: str = Field(
        "gst_single",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$",
        description="Test recipe of the framework, e.g. gst_single (RVS) or all_lvl1 (AGFHC).",
    )
    iterations: int = Field(1, ge=1, le=1000, description="How many times the recipe runs.")
    stop_on_failure: bool = Field(True, description="Stop iterating at the first failed iteration.")
    timeout_seconds: int = Field(3600, ge=60, le=604800, description="Fail a run that takes longer.")
    poll_interval_seconds: int = Field(
        30, ge=5, le=86400, description="Seconds between checks for unhealthy GPUs (auto trigger)."
    )
    logs_location: AbsolutePath = Field(
        "/var/log/gpuop-test-runner", description="Host directory where run logs are kept."
    )
