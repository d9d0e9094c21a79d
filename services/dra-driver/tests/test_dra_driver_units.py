"""Pure parts of the DRA driver: device naming, claim results, slice plans, claim CDI specs."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from gpuop_common.gpu import Vendor, open_backends
from gpuop_common.gpu.cdi import validate_spec
from gpuop_dra_driver import DRIVER_NAME
from gpuop_dra_driver.cdi import claim_spec
from gpuop_dra_driver.claims import AllocatedDevice, ClaimError, allocated_devices
from gpuop_dra_driver.devices import DraDevice, build_devices
from gpuop_dra_driver.slices import CONTENT_ANNOTATION, plan_slices
from gpuop_sim.nodes import NodeRootInfo

MakeRoot = Callable[..., NodeRootInfo]
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def device(name: str, vendor: Vendor = Vendor.AMD, uid: str = "") -> DraDevice:
    return DraDevice(name, vendor, "gpu", uid or name, uid or name, f"GPU-{name}", ("/dev/kfd",))


def claim(uid: str, results: list[dict[str, str]] | None) -> dict[str, Any]:
    status = {} if results is None else {"allocation": {"devices": {"results": results}}}
    return {"metadata": {"namespace": "ns", "name": "c", "uid": uid}, "status": status}


@pytest.mark.parametrize("profile", ["amd-mi300x-cpx", "amd-mi210x8", "nvidia-h100x8-mig", "amd-radeon"])
def test_device_names_are_unique_dns_labels_and_attributes_fit_the_api(
    profile: str, gpu_node_root: MakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = gpu_node_root(profile)
    for key, value in info.env.items():
        monkeypatch.setenv(key, value)
    gpus = [g for b in open_backends(info.root) for g in b.enumerate()]
    devices = build_devices(gpus)
    names = [d.name for d in devices]
    assert len(names) == len(set(names)) and all(DNS_LABEL.match(n) and len(n) <= 63 for n in names)
    for d in devices:
        assert len(d.attributes) + len(d.capacity) <= 32
        assert all(len(str(v)) <= 64 for a in d.attributes.values() for v in a.values())


def test_only_this_driver_s_results_are_prepared_and_every_problem_is_named() -> None:
    devices = {"g0": device("g0"), "g1": device("g1")}
    ours = {"request": "r", "driver": DRIVER_NAME, "pool": "n1"}
    results = [{**ours, "device": "g0"}, {"request": "r", "driver": "other.io", "pool": "n1", "device": "x"}]
    got = allocated_devices(claim("u", results), uid="u", driver=DRIVER_NAME, pool="n1", devices=devices)
    assert [a.device.name for a in got] == ["g0"]
    two_bad = [{**ours, "device": "g9"}, {**ours, "pool": "n2", "device": "g1"}]
    with pytest.raises(ClaimError) as err:
        allocated_devices(claim("u", two_bad), uid="u", driver=DRIVER_NAME, pool="n1", devices=devices)
    assert "ns/c" in str(err.value) and "g9" in str(err.value) and "n2/g1" in str(err.value)
    with pytest.raises(ClaimError, match="not allocated"):
        allocated_devices(claim("u", None), uid="u", driver=DRIVER_NAME, pool="n1", devices=devices)


def test_claim_spec_is_valid_cdi_with_env_for_each_vendor() -> None:
    allocated = [
        AllocatedDevice("r", "n", device("a0")),
        AllocatedDevice("r", "n", device("a0")),  # two requests on one device: one CDI device
        AllocatedDevice("s", "n", device("n0", Vendor.NVIDIA)),
    ]
    spec = claim_spec("uid-1", DRIVER_NAME, "n", allocated)
    validate_spec(spec)
    assert [d["name"] for d in spec["devices"]] == ["uid-1-a0", "uid-1-n0"]
    env = spec["containerEdits"]["env"]
    assert "ROCR_VISIBLE_DEVICES=GPU-a0" in env and "NVIDIA_VISIBLE_DEVICES=GPU-n0" in env


def test_slice_plan_keeps_the_generation_when_nothing_changed_and_bumps_it_past_every_stored_one() -> None:
    devices = [device(f"d{i}") for i in range(3)]
    first = plan_slices("n", DRIVER_NAME, devices, [])
    assert first.generation == 1 and len(first.create) == 1 and not first.update
    stored = [{**first.create[0], "metadata": {**first.create[0]["metadata"], "resourceVersion": "7"}}]
    assert plan_slices("n", DRIVER_NAME, devices, stored).empty
    changed = plan_slices("n", DRIVER_NAME, devices[:2], stored)
    assert changed.generation == 2 and changed.update[0]["metadata"]["resourceVersion"] == "7"
    assert changed.update[0]["metadata"]["annotations"][CONTENT_ANNOTATION] != _hash(stored[0])
    # A slice someone else left at a higher generation: ours go past it.
    stale = {**stored[0], "metadata": {"name": "n-gpu.gpuop.dev-9", "resourceVersion": "1"}}
    stale = {
        **stale,
        "spec": {**stale["spec"], "pool": {"name": "n", "generation": 5, "resourceSliceCount": 1}},
    }
    mixed = plan_slices("n", DRIVER_NAME, devices, [*stored, stale])
    assert mixed.generation == 6 and mixed.delete == ("n-gpu.gpuop.dev-9",)
    empty = plan_slices("n", DRIVER_NAME, [], stored)
    assert empty.update[0]["spec"]["devices"] == []  # an empty pool says "no devices" rather than vanishing


def _hash(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["annotations"][CONTENT_ANNOTATION])
