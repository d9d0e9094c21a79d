"""Recipes: the book of built-in plus user recipes a test run picks from.

A recipe (`gpuop_common.config.testrunner.Recipe`) is a command line of one framework's tool (RVS,
AGFHC, DCGM) or the built-in self-check. User recipes come with the settings (`recipes:` of the
`testRunner` section, in the DeviceConfig or the service ConfigMap) and may replace a built-in of
the same name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gpuop_common.config.testrunner import RVS_CONF_DIR, SELFCHECK, Recipe, TestRunnerConfig

__all__ = ["BUILTIN_RECIPES", "SELFCHECK", "Recipe", "RecipeBook", "RecipeError"]


class RecipeError(ValueError):
    """A recipe that does not exist or cannot be used; the message names it."""


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
    def from_config(cls, config: TestRunnerConfig) -> RecipeBook:
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
