"""`testRunner`: GPU validation runs (named testrunner.py so pytest never collects it as a test)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import Field, model_validator

from gpuop_common.config.base import AbsolutePath, ConfigModel, ImageRef, ImageSettings

Framework = Literal["RVS", "AGFHC", "DCGM", "selfcheck"]
RecipeVendor = Literal["amd", "nvidia", "any"]
Scope = Literal["per-gpu", "node"]

SELFCHECK = "gpuop-selfcheck"
RVS_CONF_DIR = "/opt/rocm/share/rocm-validation-suite/conf"
# The images AMD and NVIDIA publish with the tools in them: AMD's test runner image carries RVS under
# /opt/rocm (AGFHC only in a build AMD hands out on request: ROCm/gpu-operator remediation docs,
# `testerImage`), NVIDIA's DCGM image carries `dcgmi` and `nv-hostengine` (the GPU operator's
# `dcgm` default). docs/test-runner.md says where each was found.
DEFAULT_AMD_TOOLS_IMAGE = "docker.io/rocm/test-runner:v1.4.1"
DEFAULT_NVIDIA_TOOLS_IMAGE = "nvcr.io/nvidia/cloud-native/dcgm:4.6.0-1-ubuntu24.04"
# Which vendor's tools image runs a framework's tool.
FRAMEWORK_VENDOR: dict[str, Literal["amd", "nvidia"]] = {"RVS": "amd", "AGFHC": "amd", "DCGM": "nvidia"}
PLACEHOLDERS = frozenset({"gpu_index", "gpu_indices"})
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


class Recipe(ConfigModel):
    """One runnable test: the tool's command line and how to judge its outcome."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,127}$", description="Recipe name.")
    vendor: RecipeVendor = Field("any", description="GPU vendor the recipe is for.")
    framework: Framework = Field(description="Tool family; decides how the output is parsed.")
    command: list[str] = Field(
        default_factory=list, description="argv of the tool; {gpu_index} / {gpu_indices} name targets."
    )
    timeout_seconds: int = Field(3600, ge=1, le=604800, description="Fail a run that takes longer.")
    iterations: int = Field(1, ge=1, le=1000, description="How many times the command runs.")
    stop_on_failure: bool = Field(True, description="Stop iterating at the first failed iteration.")
    scope: Scope = Field("node", description="per-gpu: one command per GPU; node: one for all targets.")
    pass_exit_codes: list[int] = Field(
        default_factory=lambda: [0], min_length=1, description="Exit codes that do not fail the run."
    )

    @model_validator(mode="after")
    def _command_fits_framework(self) -> Recipe:
        if self.framework == "selfcheck":
            if self.command:
                raise ValueError("a selfcheck recipe has no command")
            return self
        if not self.command or not self.command[0]:
            raise ValueError(f"a {self.framework} recipe needs a command")
        for arg in self.command:
            for name in _PLACEHOLDER.findall(arg):
                if name not in PLACEHOLDERS:
                    raise ValueError(
                        f"unknown placeholder {{{name}}} in command (known: gpu_index, gpu_indices)"
                    )
                if name == "gpu_index" and self.scope != "per-gpu":
                    raise ValueError("{gpu_index} needs scope per-gpu")
        return self

    @property
    def targets_gpus(self) -> bool:
        """Whether the command is told which GPUs to test (else the tool touches every GPU)."""
        return self.framework == "selfcheck" or any(_PLACEHOLDER.search(arg) for arg in self.command)

    def argv(self, gpu_indices: Iterable[int]) -> list[str]:
        """The command with the placeholders filled; per-GPU recipes get one index at a time."""
        indices = [str(i) for i in gpu_indices]
        values = {"gpu_indices": ",".join(indices), "gpu_index": indices[0] if indices else ""}
        return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in self.command]


def tools_image_setting(vendor: str) -> str:
    """The setting that names `vendor`'s tools image, as a user writes it (DeviceConfig spec and
    the test-runner chart's `config`): what a ToolMissing message points at."""
    return f"testRunner.toolsImage.{vendor}"


class ToolsImages(ConfigModel):
    """Per vendor, the image the vendor tools (RVS/AGFHC, dcgmi) run in; empty: the test runner's own
    PATH and --tool-path (a node with the tools installed, or standalone use)."""

    amd: ImageRef = Field(
        DEFAULT_AMD_TOOLS_IMAGE, description="Image with rvs (and agfhc) for RVS/AGFHC recipes; empty: local."
    )
    nvidia: ImageRef = Field(
        DEFAULT_NVIDIA_TOOLS_IMAGE, description="Image with dcgmi for DCGM recipes; empty: local."
    )

    def for_recipe(self, recipe: Recipe) -> tuple[str, str]:
        """(vendor, image) a recipe's tool runs in; vendor "" for the self-check."""
        vendor = recipe.vendor if recipe.vendor != "any" else FRAMEWORK_VENDOR.get(recipe.framework, "")
        if vendor not in ("amd", "nvidia"):
            return "", ""
        return vendor, str(getattr(self, vendor))


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
    tools_image: ToolsImages = Field(
        default_factory=ToolsImages,
        description="Per vendor, the image vendor recipes run in (a pod on the node); empty: local tools.",
    )
    recipes: list[Recipe] = Field(
        default_factory=list,
        max_length=256,
        description="User recipes beside the built-ins; a recipe may replace a built-in of its name.",
    )
