"""Recipes: what a test run executes, and the book of built-in plus user recipes.

A recipe is a command line of one framework's tool (RVS, AGFHC, DCGM) or the built-in self-check.
User recipes come from the service ConfigMap (`recipes:` next to the `testRunner` settings) and may
replace a built-in of the same name. Command arguments may name the GPUs a run targets:
`{gpu_index}` (per-GPU recipes: the command runs once per GPU) and `{gpu_indices}` (comma list).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Literal

from gpuop_common.config.base import ConfigModel
from gpuop_common.config.testrunner import TestRunnerConfig
from pydantic import Field, model_validator

Framework = Literal["RVS", "AGFHC", "DCGM", "selfcheck"]
RecipeVendor = Literal["amd", "nvidia", "any"]
Scope = Literal["per-gpu", "node"]

SELFCHECK = "gpuop-selfcheck"
RVS_CONF_DIR = "/opt/rocm/share/rocm-validation-suite/conf"
PLACEHOLDERS = frozenset({"gpu_index", "gpu_indices"})
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")


class RecipeError(ValueError):
    """A recipe that does not exist or cannot be used; the message names it."""


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


class TestRunnerFileConfig(TestRunnerConfig):
    """The service ConfigMap file: the `testRunner` settings plus user recipes."""

    __test__ = False

    recipes: list[Recipe] = Field(
        default_factory=list, description="User recipes; a name may shadow a built-in."
    )


def _rvs(name: str, timeout: int = 3600) -> Recipe:
    return Recipe(
        name=name,
        vendor="amd",
        framework="RVS",
        command=["rvs", "-c", f"{RVS_CONF_DIR}/{name}.conf"],
        timeout_seconds=timeout,
    )


def _agfhc(name: str) -> Recipe:
    return Recipe(name=name, vendor="amd", framework="AGFHC", command=["agfhc", "-r", name])


def _dcgm(level: int) -> Recipe:
    return Recipe(
        name=f"dcgm-level-{level}",
        vendor="nvidia",
        framework="DCGM",
        command=["dcgmi", "diag", "-r", str(level), "-j", "-i", "{gpu_indices}"],
    )


BUILTIN_RECIPES: tuple[Recipe, ...] = (
    Recipe(name=SELFCHECK, framework="selfcheck", timeout_seconds=60),
    *(_rvs(name) for name in ("gst_single", "babel", "iet_single", "pebb_single", "pbqt_single")),
    *(_agfhc(f"all_lvl{level}") for level in range(1, 6)),
    *(_dcgm(level) for level in range(1, 5)),
)


class RecipeBook:
    """Recipes by name: the built-ins, overridden or extended by the user's."""

    def __init__(self, user: Iterable[Recipe] = ()) -> None:
        self._recipes: dict[str, Recipe] = {r.name: r for r in BUILTIN_RECIPES}
        for recipe in user:
            self._recipes[recipe.name] = recipe

    @classmethod
    def from_config(cls, config: TestRunnerFileConfig) -> RecipeBook:
        return cls(config.recipes)

    @property
    def names(self) -> list[str]:
        return sorted(self._recipes)

    def get(self, name: str) -> Recipe:
        recipe = self._recipes.get(name)
        if recipe is None:
            raise RecipeError(f"unknown recipe {name!r} (known: {', '.join(self.names)})")
        return recipe

    def for_trigger(self, config: TestRunnerConfig) -> Recipe:
        """The recipe automatic runs use: `config.recipe`, with the config's explicit overrides."""
        recipe = self.get(config.recipe)
        if recipe.framework not in ("selfcheck", config.framework):
            raise RecipeError(
                f"recipe {recipe.name!r} is a {recipe.framework} recipe but framework is {config.framework}"
            )
        overrides: Mapping[str, object] = {
            name: getattr(config, name)
            for name in ("iterations", "stop_on_failure", "timeout_seconds")
            if name in config.model_fields_set
        }
        return recipe.model_copy(update=dict(overrides)) if overrides else recipe
