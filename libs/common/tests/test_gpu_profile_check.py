"""Partition profiles against the simulated MI300X and H100 nodes: targets, or the reasons to refuse."""

from __future__ import annotations

import pytest
from gpuop_common.config.config_manager import PartitionProfile
from gpuop_common.gpu import AmdSysfsBackend, NvmlBackend
from gpuop_common.gpu.profile_check import gpu_matches, plan_profile
from gpuop_sim.nodes.fake_nvml import FakeNvml


def _profile(**body):
    return PartitionProfile.model_validate({"name": "p", **body})


@pytest.fixture(scope="module")
def mi300x_spx(tmp_path_factory):
    from gpuop_sim.nodes import build_node_root

    info = build_node_root("amd-mi300x-spx", tmp_path_factory.mktemp("spx") / "root")
    backend = AmdSysfsBackend(info.root)
    gpus = backend.enumerate()
    xcc = {g.id: backend.xcc_count(g.id) for g in gpus}
    assert backend.xcc_counts() == xcc
    return gpus, xcc


@pytest.fixture(scope="module")
def h100(tmp_path_factory):
    from gpuop_sim.nodes import build_node_root

    info = build_node_root("nvidia-h100x8-mig", tmp_path_factory.mktemp("mig") / "root")
    backend = NvmlBackend(FakeNvml(path=info.nvml_state_path), info.root)
    gpus = backend.enumerate()
    layouts = {g.id: backend.mig_writer(g.id).layout() for g in gpus}
    backend.close()
    return gpus, layouts


def test_cpx_nps4_on_spx_node_targets_every_gpu_but_skipped(mi300x_spx):
    gpus, xcc = mi300x_spx
    plan = plan_profile(
        _profile(amd={"computePartition": "CPX", "memoryPartition": "NPS4", "skippedGpus": [7]}), gpus, xcc
    )
    assert plan.valid and len(plan.targets) == 7
    assert all(t.describe == "CPX/NPS4" for t in plan.targets)
    assert not any(gpu_matches(t, g) for t, g in zip(plan.targets, gpus, strict=False))
    same = plan_profile(_profile(amd={"computePartition": "SPX", "memoryPartition": "NPS1"}), gpus, xcc)
    assert all(gpu_matches(t, g) for t, g in zip(same.targets, gpus, strict=True))


@pytest.mark.parametrize(
    ("amd", "reason"),
    [
        (
            {"computePartition": "TPX"},
            "compute partition TPX is not available (available: SPX, DPX, QPX, CPX)",
        ),
        ({"computePartition": "CPX", "memoryPartition": "NPS2"}, "memory partition NPS2 is not available"),
        ({"computePartition": "SPX", "memoryPartition": "NPS4"}, "SPX is refused with memory partition NPS4"),
        ({"computePartition": "DPX", "memoryPartition": "NPS4"}, "DPX is refused with memory partition NPS4"),
        ({"skippedGpus": [8]}, "amd.skippedGpus: GPU index 8 does not exist (8 AMD GPUs)"),
    ],
)
def test_invalid_amd_profiles_name_the_reason(mi300x_spx, amd, reason):
    gpus, xcc = mi300x_spx
    plan = plan_profile(_profile(amd=amd), gpus, xcc)
    assert not plan.valid
    assert any(reason in r for r in plan.reasons), plan.reasons
    assert "AMD GPU 0 (0000:05:00.0)" in " ".join(plan.reasons) or "skippedGpus" in reason


def test_mig_profiles(h100):
    gpus, layouts = h100
    all_1g = plan_profile(_profile(nvidia=[{"migEnabled": True, "migDevices": {"1g.10gb": 7}}]), gpus)
    assert all_1g.valid and len(all_1g.targets) == 8
    matches = [gpu_matches(t, g, layouts[g.id]) for t, g in zip(all_1g.targets, gpus, strict=True)]
    assert matches == [True] + [False] * 7  # GPU 0 already has 7x 1g.10gb
    off = plan_profile(_profile(nvidia=[{"devices": [5, 6], "migEnabled": False}]), gpus)
    assert [t.index for t in off.targets] == [5, 6]
    assert all(gpu_matches(t, gpus[t.index], layouts[gpus[t.index].id]) for t in off.targets)


@pytest.mark.parametrize(
    ("nvidia", "reason"),
    [
        ([{"migEnabled": True, "migDevices": {"3g.40gb": 2, "1g.10gb": 1}}], "has no placement"),
        ([{"migEnabled": True, "migDevices": {"1g.5gb": 7}}], "1g.5gb does not exist"),
        ([{"devices": [8], "migEnabled": False}], "nvidia[0].devices: GPU index 8 does not exist"),
        (
            [{"devices": [0], "migEnabled": False}, {"devices": [0, 1], "migEnabled": False}],
            "nvidia[1].devices: GPU index 0 is already set by nvidia[0]",
        ),
    ],
)
def test_invalid_mig_profiles_name_the_reason(h100, nvidia, reason):
    gpus, _ = h100
    plan = plan_profile(_profile(nvidia=nvidia), gpus)
    assert not plan.valid and any(reason in r for r in plan.reasons), plan.reasons


def test_profile_for_the_other_vendor_is_refused(h100):
    gpus, _ = h100
    plan = plan_profile(_profile(amd={"computePartition": "CPX", "memoryPartition": "NPS4"}), gpus)
    assert plan.reasons == ("profile p has no layout for the GPUs on this node (0 AMD, 8 NVIDIA)",)


def test_a_gpu_takes_the_first_amd_models_entry_naming_its_model_then_amd(mi300x_spx):
    gpus, xcc = mi300x_spx  # 8x "AMD Instinct MI300X", PCI device 0x74a1
    per_model = _profile(
        amdModels=[
            {"models": ["MI250X"], "computePartition": "DPX"},  # another model: no GPU here
            {"models": ["0x74A1"], "computePartition": "CPX", "memoryPartition": "NPS4", "skippedGpus": [0]},
            {"models": ["MI300X"], "computePartition": "QPX"},  # later entries lose
        ],
        amd={"computePartition": "SPX"},
    )
    plan = plan_profile(per_model, gpus, xcc)
    assert plan.valid and [t.index for t in plan.targets] == [1, 2, 3, 4, 5, 6, 7]
    assert {t.describe for t in plan.targets} == {"CPX/NPS4"}  # GPU 0 skipped by its entry, not `amd`
    by_name = _profile(amdModels=[{"models": ["mi300x"], "computePartition": "QPX"}])
    assert {t.describe for t in plan_profile(by_name, gpus, xcc).targets} == {"QPX/NPS1"}
    # A profile whose models are all elsewhere has nothing for this node: refused, as for a vendor.
    elsewhere = _profile(amdModels=[{"models": ["MI300"], "computePartition": "CPX"}])  # not MI300X
    assert plan_profile(elsewhere, gpus, xcc).reasons == (
        "profile p has no layout for the GPUs on this node (8 AMD, 0 NVIDIA)",
    )
    bad = _profile(amdModels=[{"models": ["MI300X"], "computePartition": "TPX", "skippedGpus": [9]}])
    reasons = " ".join(plan_profile(bad, gpus, xcc).reasons)
    assert "amdModels[0].skippedGpus: GPU index 9 does not exist" in reasons
    assert "compute partition TPX is not available" in reasons


def test_nvidia_groups_can_be_limited_to_models(h100):
    gpus, _ = h100  # 8x "NVIDIA H100 80GB HBM3"
    h100_only = _profile(
        nvidia=[
            {"models": ["A100"], "migEnabled": True, "migDevices": {"1g.10gb": 7}},  # no A100 here
            {"models": ["H100 80GB"], "migEnabled": False},
        ]
    )
    plan = plan_profile(h100_only, gpus)
    assert plan.valid and len(plan.targets) == 8 and {t.describe for t in plan.targets} == {"MIG off"}
    named = _profile(nvidia=[{"devices": [2], "models": ["A100"], "migEnabled": False}])
    assert any("GPU index 2 is a NVIDIA H100 80GB HBM3, not one of models A100" in r
               for r in plan_profile(named, gpus).reasons)  # fmt: skip


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"amdModels": [{"models": [], "computePartition": "CPX"}]}, "models"),  # an entry for no model
        ({"amdModels": [{"models": ["MI300X; rm"], "computePartition": "CPX"}]}, "models"),
        ({"nvidia": [{"models": [""], "migEnabled": False}]}, "models"),
    ],
)
def test_bad_model_filters_are_refused_naming_the_field(body, field):
    with pytest.raises(ValueError, match=field):
        _profile(**body)
