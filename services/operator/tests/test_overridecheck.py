"""The playbook-override ConfigMap check, on the bad inputs a person would write."""

from __future__ import annotations

from typing import Any

import pytest
from gpuop_operator.overridecheck import override_problems

NAME = "gpu-operator/playbook-overrides"
GOOD = "- hosts: localhost\n  tasks:\n    - name: say\n      ansible.builtin.debug:\n        msg: hi\n"


def problems(data: dict[str, str], **extra: Any) -> list[str]:
    return override_problems(NAME, {"data": data, **extra})


def test_a_usable_override_and_keys_that_are_not_playbooks_pass() -> None:
    assert problems({"driver-install.yml": GOOD, "README": "not a playbook", "notes.txt": "{"}) == []
    assert problems({"site.yaml": "- import_playbook: driver-install.yml\n"}) == []
    assert override_problems(NAME, {}) == []  # an empty ConfigMap overrides nothing


def test_a_missing_config_map_names_itself_and_the_setting() -> None:
    (problem,) = override_problems(NAME, None)
    assert problem.startswith(f"ConfigMap {NAME} (--driver-playbook-overrides) not found")
    assert "driverJobs.playbookOverrides" in problem


def test_invalid_yaml_names_the_key_line_and_column() -> None:
    (problem,) = problems({"driver-install.yml": "- hosts: localhost\n  tasks:\n    - name: [oops\n"})
    assert "key driver-install.yml: not valid YAML at line" in problem


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("hosts: localhost\n", "a playbook is a non-empty YAML list of plays"),
        ("", "a playbook is a non-empty YAML list of plays"),
        ("[]\n", "a playbook is a non-empty YAML list of plays"),
        ("- just a string\n", "play 0: a play is a mapping, got str"),
        ("- tasks: []\n", "play 0: needs `hosts` (or `import_playbook`)"),
    ],
)
def test_a_document_that_is_not_a_list_of_plays_is_refused(text: str, expected: str) -> None:
    assert problems({"node-reboot.yml": text}) == [
        f"ConfigMap {NAME} (--driver-playbook-overrides) key node-reboot.yml: {expected}"
    ]


def test_two_keys_for_one_playbook_and_binary_data_are_refused() -> None:
    found = problems({"driver-install.yml": GOOD, "driver-install.yaml": GOOD})
    assert found == [
        f"ConfigMap {NAME} (--driver-playbook-overrides): both driver-install.yaml and "
        "driver-install.yml override driver-install; keep one"
    ]
    (binary,) = problems({}, binaryData={"gpu-reset.yml": "LS0t"})
    assert binary.endswith("key gpu-reset.yml: a playbook must be in data, not binaryData")
