"""Recipes: built-ins, user recipes from the ConfigMap file, and clear errors for bad ones."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuop_common.config.testrunner import TestRunnerConfig
from gpuop_common.configfile import ConfigFileError, load_config
from gpuop_test_runner.recipes import SELFCHECK, Recipe, RecipeBook, RecipeError
from pydantic import ValidationError


def test_builtins_cover_every_framework_and_the_selfcheck() -> None:
    book = RecipeBook()
    assert {book.get(n).framework for n in book.names} == {"RVS", "AGFHC", "DCGM", "selfcheck"}
    assert book.get(SELFCHECK).command == []
    assert book.get("dcgm-level-2").argv([0, 3]) == ["dcgmi", "diag", "-r", "2", "-j", "-i", "0,3"]
    assert book.get("all_lvl1").argv([1]) == ["agfhc", "-r", "all_lvl1"]


def test_user_recipes_from_the_config_file_extend_and_shadow(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "recipe: quick\n"
        "timeoutSeconds: 120\n"
        "recipes:\n"
        "- {name: quick, framework: RVS, command: [rvs, -c, /etc/quick.conf], timeoutSeconds: 5}\n"
        "- {name: gst_single, framework: RVS, command: [rvs, -c, /mine.conf], scope: per-gpu}\n"
    )
    config = load_config(path, TestRunnerConfig)
    book = RecipeBook.from_config(config)
    assert book.get("gst_single").command == ["rvs", "-c", "/mine.conf"]
    trigger = book.for_trigger(config)
    # The config's explicit timeout applies to what the triggers run; the recipe's own stays put.
    assert (trigger.name, trigger.timeout_seconds, book.get("quick").timeout_seconds) == ("quick", 120, 5)


def test_bad_user_recipe_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("recipes:\n- {name: x, framework: DCGM, command: [dcgmi, '{gpu_index}']}\n")
    with pytest.raises(ConfigFileError, match=r"recipes\.0.*gpu_index.*per-gpu"):
        load_config(path, TestRunnerConfig)
    path.write_text("recipes:\n- {name: x, framework: RVS, timeoutSecond: 5, command: [rvs]}\n")
    with pytest.raises(ConfigFileError, match=r"recipes\.0\.timeoutSecond"):
        load_config(path, TestRunnerConfig)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"framework": "RVS"}, "needs a command"),
        ({"framework": "selfcheck", "command": ["x"]}, "has no command"),
        ({"framework": "RVS", "command": ["rvs", "{gpu}"]}, "unknown placeholder"),
        ({"framework": "XYZ", "command": ["x"]}, "framework"),
    ],
)
def test_recipe_validation(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Recipe.model_validate({"name": "r", **fields})


def test_unknown_recipe_and_framework_mismatch_are_recipe_errors() -> None:
    book = RecipeBook()
    with pytest.raises(RecipeError, match=r"unknown recipe 'nope'.*gst_single"):
        book.get("nope")
    with pytest.raises(RecipeError, match="DCGM recipe but framework is RVS"):
        book.for_trigger(TestRunnerConfig(recipe="dcgm-level-1"))
    assert book.for_trigger(TestRunnerConfig(recipe=SELFCHECK)).name == SELFCHECK
