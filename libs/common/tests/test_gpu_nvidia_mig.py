"""MIG writes through NVML (against the fake NVML with pynvml's calls and errors) and layout fit checks."""

from __future__ import annotations

import pytest
from gpuop_common.gpu import NvmlBackend, PartitionWriteError
from gpuop_common.gpu.mig_geometry import fit_refusal
from gpuop_sim.nodes import update_nvml_state
from gpuop_sim.nodes.fake_nvml import FakeNvml
from gpuop_sim.nodes.nvml_state import load_state

H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def nodes(gpu_node_root):
    made = []

    def make(profile):
        info = gpu_node_root(profile)
        nvml = FakeNvml(path=info.nvml_state_path)
        backend = NvmlBackend(nvml, info.root)
        made.append(backend)
        return info, nvml, backend

    yield make
    for backend in made:
        backend.close()


def test_all_1g_then_disabled(nodes):
    info, _, backend = nodes("nvidia-h100x8")
    gpu = backend.enumerate()[0]
    writer = backend.mig_writer(gpu.id)
    writer.apply(True, {"1g.10gb": 7})
    assert writer.layout() == {"1g.10gb": 7}
    migs = backend.enumerate()[0].mig_devices
    assert len(migs) == 7 and {m.profile for m in migs} == {"1g.10gb"}
    assert sorted(m.gpu_instance_id for m in migs) == list(range(7, 14))
    writer.apply(False, {})
    assert backend.enumerate()[0].partition.compute == "none"
    state = load_state(info.nvml_state_path).gpus[0]
    assert state.mig_devices == [] and state.gpu_instances == []


def test_relayout_replaces_instances(nodes):
    _, _, backend = nodes("nvidia-h100x8-mig")
    gpu = backend.enumerate()[1]  # 2x 3g.40gb
    writer = backend.mig_writer(gpu.id)
    assert writer.layout() == {"3g.40gb": 2}
    writer.apply(True, {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2})
    assert writer.layout() == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}


def test_layout_that_does_not_fit_is_insufficient_resources(nodes):
    _, _, backend = nodes("nvidia-h100x8")
    writer = backend.mig_writer(backend.enumerate()[2].id)
    with pytest.raises(PartitionWriteError) as excinfo:
        writer.apply(True, {"3g.40gb": 2, "1g.10gb": 1})
    assert excinfo.value.errno_name == "NVMLError_InsufficientResources"
    assert "nvmlDeviceCreateGpuInstance" in str(excinfo.value)
    assert "the GPU was put back as it was" in str(excinfo.value)
    assert writer.modes() == (0, 0) and writer.instances() == []  # MIG off again, nothing pending
    # The node is still usable: a layout that fits applies.
    writer.apply(True, {"7g.80gb": 1})
    assert writer.layout() == {"7g.80gb": 1}


def test_a_refused_relayout_puts_the_instances_back_at_their_placements(nodes):
    _, _, backend = nodes("nvidia-h100x8-mig")
    writer = backend.mig_writer(backend.enumerate()[2].id)  # 3g.40gb@0 + 2g.20gb@4 + 1g.10gb@6
    before = {(i.key, i.compute_instances) for i in writer.instances()}
    with pytest.raises(PartitionWriteError) as excinfo:
        writer.apply(True, {"3g.40gb": 2, "1g.10gb": 1})  # the 1g.10gb finds no slice left
    assert excinfo.value.errno_name == "NVMLError_InsufficientResources"
    assert {(i.key, i.compute_instances) for i in writer.instances()} == before
    assert writer.layout() == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}


def test_mig_mode_the_driver_cannot_activate_is_withdrawn(nodes):
    info, _, backend = nodes("nvidia-h100x8")
    update_nvml_state(info.root, lambda s: setattr(s.gpus[3], "processes", [4242]))
    writer = backend.mig_writer(backend.enumerate()[3].id)
    with pytest.raises(PartitionWriteError) as excinfo:
        writer.apply(True, {"1g.10gb": 7})
    assert excinfo.value.errno_name == "NVMLError_InUse"
    assert "MIG mode on not activated: activation status In use by another client" in str(excinfo.value)
    assert writer.modes() == (0, 0)  # not pending for the GPU's next reset


def test_a_pending_mode_left_by_someone_else_is_withdrawn(nodes):
    info, _, backend = nodes("nvidia-h100x8")
    update_nvml_state(info.root, lambda s: setattr(s.gpus[4], "mig_pending", 1))  # e.g. nvidia-smi -mig 1
    writer = backend.mig_writer(backend.enumerate()[4].id)
    writer.apply(False, {})
    assert writer.modes() == (0, 0)


def test_orphan_gpu_instance_from_a_crash_is_cleaned_up(nodes):
    _, nvml, backend = nodes("nvidia-h100x8")
    gpu = backend.enumerate()[0]
    writer = backend.mig_writer(gpu.id)
    writer.set_mode(True)
    handle = nvml.nvmlDeviceGetHandleByUUID(gpu.id)
    # A crash between creating the GPU instance and its compute instance.
    nvml.nvmlDeviceCreateGpuInstance(handle, nvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE)
    with pytest.raises(nvml.NVMLError_InsufficientResources):
        nvml.nvmlDeviceCreateGpuInstance(handle, nvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    writer.apply(True, {"1g.10gb": 7})
    assert writer.layout() == {"1g.10gb": 7}


def test_fake_nvml_errors_follow_pynvml(nodes):
    _, nvml, _backend = nodes("nvidia-h100x8-mig")
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nvml.NVMLError_InUse):
        nvml.nvmlDeviceSetMigMode(handle, nvml.NVML_DEVICE_MIG_DISABLE)
    gi = nvml.nvmlDeviceGetGpuInstanceById(handle, 7)
    with pytest.raises(nvml.NVMLError_InUse):
        nvml.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetGpuInstanceById(handle, 14)
    info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, nvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE)
    assert (info.sliceCount, info.memorySizeMB, info.name) == (3, 40192, b"MIG 3g.40gb")
    assert nvml.nvmlDeviceGetGpuInstanceRemainingCapacity(handle, info.id) == 0
    off = nvml.nvmlDeviceGetHandleByIndex(5)
    with pytest.raises(nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetGpuInstanceProfileInfo(off, nvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)


@pytest.mark.parametrize(
    ("devices", "reason"),
    [
        ({"1g.10gb": 7}, None),
        ({"3g.40gb": 2}, None),
        ({"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}, None),
        ({"1g.10gb": 8}, "needs 8 compute slices"),
        ({"3g.40gb": 2, "1g.10gb": 1}, "has no placement"),
        ({"1g.5gb": 7}, "1g.5gb does not exist on NVIDIA H100 80GB HBM3"),
    ],
)
def test_fit_refusal(devices, reason):
    refusal = fit_refusal(H100, devices)
    assert (refusal is None) if reason is None else (reason in (refusal or ""))


def test_unknown_model_is_left_to_the_driver():
    assert fit_refusal("NVIDIA GeForce RTX 4090", {"1g.10gb": 99}) is None
