"""Pure label logic: which profile a node asks for, state labels per vendor (the pause: gpuop_common)."""

from __future__ import annotations

import pytest
from gpuop_common.config.config_manager import ConfigManagerConfig
from gpuop_common.gpu.models import Vendor
from gpuop_config_manager.labels import (
    State,
    select_profile,
    state_labels,
)
from gpuop_config_manager.progress import parse_progress

CONFIG = ConfigManagerConfig.model_validate(
    {
        "profiles": [
            {"name": "a", "amd": {"computePartition": "CPX"}},
            {"name": "b", "amd": {}, "nodeSelector": {"pool": "cpx"}},
        ]
    }
)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({}, (None, "")),
        ({"pool": "cpx"}, ("b", "nodeSelector")),
        ({"nvidia.com/mig.config": "x", "pool": "cpx"}, ("x", "nvidia.com/mig.config")),
        (
            {"dcm.amd.com/gpu-config-profile": "y", "nvidia.com/mig.config": "x"},
            ("y", "dcm.amd.com/gpu-config-profile"),
        ),
        (
            {"gpuop.dev/gpu-config-profile": "a", "dcm.amd.com/gpu-config-profile": "y"},
            ("a", "gpuop.dev/gpu-config-profile"),
        ),
        ({"gpuop.dev/gpu-config-profile": " "}, (None, "")),
    ],
)
def test_selection_precedence(labels, expected):
    selection = select_profile(labels, CONFIG)
    assert (selection.name, selection.source) == expected


def test_state_labels_per_vendor():
    assert state_labels(State.QUIESCING, [Vendor.AMD]) == {"gpuop.dev/gpu-config-state": "quiescing"}
    assert state_labels(State.FAILED, [Vendor.AMD, Vendor.NVIDIA]) == {
        "gpuop.dev/gpu-config-state": "failed",
        "nvidia.com/mig.config.state": "failed",
        "dcm.amd.com/gpu-config-profile-state": "failure",
    }
    assert state_labels(State.APPLYING, [Vendor.NVIDIA])["nvidia.com/mig.config.state"] == "pending"


def test_garbled_progress_annotation_is_ignored(caplog):
    assert parse_progress('{"profile": "a"}') is None
    assert parse_progress("not json") is None
    assert "unreadable progress annotation" in caplog.text


def test_config_field_errors_name_the_field():
    with pytest.raises(ValueError, match="quiesceTimeoutSeconds"):
        ConfigManagerConfig.model_validate({"quiesceTimeoutSeconds": 0})
    with pytest.raises(ValueError, match="pausedOperands"):
        ConfigManagerConfig.model_validate({"pausedOperands": ["Bad Name"]})
