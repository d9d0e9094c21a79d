"""`configManager.profilesConfigMap`: the profiles of the ConfigMap it names, or why they can't be used."""

from __future__ import annotations

from typing import Any

import pytest
from gpuop_common.config.config_manager import ConfigManagerConfig
from gpuop_operator.profilesource import NamedProfiles, named_profiles

NS = "gpu-operator"
SECTION = ConfigManagerConfig.model_validate({"enable": True, "profilesConfigMap": "site-profiles"})
WHERE = "spec.configManager.profilesConfigMap: ConfigMap gpu-operator/site-profiles"


def _cm(text: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "site-profiles"}, "data": {} if text is None else {"profiles.yaml": text}}


def test_a_valid_list_gives_its_profiles_in_order() -> None:
    text = "- {name: site-a, amd: {computePartition: DPX, memoryPartition: NPS2}}\n- {name: b, nvidia: []}\n"
    found = named_profiles(SECTION, NS, _cm(text))
    assert found.problem == "" and [p.name for p in found.profiles] == ["site-a", "b"]
    assert named_profiles(SECTION, NS, _cm("")) == NamedProfiles()  # an empty list is a list


def test_nothing_named_or_the_manager_off_reads_nothing() -> None:
    assert named_profiles(ConfigManagerConfig(enable=True), NS, None) == NamedProfiles()
    off = ConfigManagerConfig.model_validate({"enable": False, "profilesConfigMap": "site-profiles"})
    assert named_profiles(off, NS, None) == NamedProfiles()


@pytest.mark.parametrize(
    ("config_map", "problem"),
    [
        (None, f"{WHERE} not found"),
        (_cm(None), f"{WHERE} has no key profiles.yaml"),
        (_cm("- {name: a, amd: {\n"), f"{WHERE} key profiles.yaml: not YAML (line 2)"),
        (_cm("name: a\n"), f"{WHERE} key profiles.yaml: Input should be a valid list"),
        (
            _cm("- {name: a, amd: {computePartition: XPX}}\n"),
            f"{WHERE} key profiles.yaml[0].amd.computePartition: Input should be 'SPX', 'DPX'",
        ),
        (
            _cm("- {name: Bad Name, amd: {}}\n"),
            f"{WHERE} key profiles.yaml[0].name: String should match pattern",
        ),
        (_cm("- {name: a}\n"), f"{WHERE} key profiles.yaml[0]: Value error, profile a: set amd, amdModels"),
        (
            _cm("- {name: a, amd: {}}\n- {name: a, nvidia: []}\n"),
            f"{WHERE} key profiles.yaml: name a used more than once",
        ),
    ],
    ids=["missing", "no-key", "not-yaml", "not-a-list", "bad-mode", "bad-name", "no-layout", "duplicate"],
)
def test_an_unusable_config_map_names_the_field_and_what_is_wrong(
    config_map: dict[str, Any] | None, problem: str
) -> None:
    found = named_profiles(SECTION, NS, config_map)
    assert found.profiles == () and found.problem.startswith(problem), found.problem
