"""gpuop_common.gpu.cdi: the CDI spec model refuses what a CDI runtime would refuse to load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.gpu import Vendor
from gpuop_common.gpu.cdi import (
    CdiSpecError,
    device_node_edits,
    validate_spec,
    versioned,
    visible_devices_env,
    write_spec_file,
)


def spec(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "cdiVersion": "0.6.0",
        "kind": "k8s.gpu.gpuop.dev/claim",
        "containerEdits": {"env": ["A=1"]},
        "devices": [
            {"name": "uid-gpu-0", "containerEdits": {"deviceNodes": device_node_edits(["/dev/kfd"])}}
        ],
    }
    base.update(changes)
    return base


def test_a_good_spec_validates() -> None:
    assert validate_spec(spec()).devices[0].containerEdits.deviceNodes[0].path == "/dev/kfd"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"kind": "no-slash"}, "kind"),
        ({"kind": "vendor.com/"}, "kind"),
        ({"cdiVersion": "6"}, "cdiVersion"),
        ({"devices": []}, "devices"),
        ({"devices": [{"name": "-bad", "containerEdits": {}}]}, "devices.0.name"),
        (
            {"devices": [{"name": "a", "containerEdits": {"deviceNodes": [{"path": "dev/kfd"}]}}]},
            "not absolute",
        ),
        (
            {
                "devices": [
                    {"name": "a", "containerEdits": {"deviceNodes": [{"path": "/d", "permissions": "x"}]}}
                ]
            },
            "permissions",
        ),
        ({"containerEdits": {"env": ["NOEQUALS"]}}, "NAME=value"),
        (
            {"devices": [{"name": "a", "containerEdits": {}}, {"name": "a", "containerEdits": {}}]},
            "appear twice",
        ),
        ({"devices": [{"name": "a", "containerEdits": {}, "extra": 1}]}, "extra"),
        ({"cdiVersion": "0.9.0"}, "not a CDI version"),
        ({"cdiVersion": "0.4.0", "annotations": {"a": "b"}}, "lower than 0.6.0"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    with pytest.raises(CdiSpecError, match="invalid CDI spec") as err:
        validate_spec(spec(**changes))
    assert field in str(err.value)


def test_visible_devices_env_names_each_id_once() -> None:
    assert visible_devices_env(Vendor.AMD, ["GPU-a", "GPU-b", "GPU-a"]) == {
        "ROCR_VISIBLE_DEVICES": "GPU-a,GPU-b",
        "HIP_VISIBLE_DEVICES": "GPU-a,GPU-b",
    }
    assert visible_devices_env(Vendor.NVIDIA, []) == {}
    assert device_node_edits(["/dev/kfd", "/dev/kfd", "/dev/dri/renderD128"]) == [
        {"path": "/dev/kfd", "permissions": "rw"},
        {"path": "/dev/dri/renderD128", "permissions": "rw"},
    ]


def test_write_spec_file_is_atomic_and_skips_unchanged_text(tmp_path: Path) -> None:
    path = tmp_path / "cdi" / "x.json"
    assert write_spec_file(path, spec())
    assert json.loads(path.read_text()) == spec()
    assert not write_spec_file(path, spec())
    assert write_spec_file(path, spec(kind="other.dev/x"))
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]  # no temp files left behind


def device(name: str = "gpu0", **edits: Any) -> dict[str, Any]:
    return {"name": name, "containerEdits": {"deviceNodes": [{"path": "/dev/kfd", **edits}]}}


@pytest.mark.parametrize(
    ("body", "version"),
    [
        ({"kind": "amd.com/gpu", "devices": [device()]}, "0.3.0"),
        # The dots the CDI library minds are in the class, not the vendor.
        ({"kind": "k8s.gpu.gpuop.dev/claim", "devices": [device()]}, "0.3.0"),
        ({"kind": "amd.com/gpu", "devices": [device("0000:03:00.0")]}, "0.5.0"),
        ({"kind": "amd.com/gpu", "devices": [device(hostPath="/dev/kfd")]}, "0.5.0"),
        ({"kind": "amd.com/gpu", "devices": [device()], "annotations": {"a": "b"}}, "0.6.0"),
        ({"kind": "amd.com/gpu", "devices": [{**device(), "annotations": {"a": "b"}}]}, "0.6.0"),
        ({"kind": "amd.com/gpu.mi300", "devices": [device("0")]}, "0.6.0"),
    ],
)
def test_versioned_writes_the_lowest_version_the_features_need(body: dict[str, Any], version: str) -> None:
    spec = versioned(body)
    assert spec == {**body, "cdiVersion": version}
    validate_spec(spec)


def test_versioned_refuses_an_invalid_spec() -> None:
    with pytest.raises(CdiSpecError, match="devices"):
        versioned({"kind": "amd.com/gpu", "devices": []})
