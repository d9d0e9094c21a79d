"""The fake NVML behaves like pynvml where the backend and other services depend on it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from gpuop_sim.nodes import fake_nvml, inject_xid, update_nvml_state
from gpuop_sim.nodes.fake_nvml import FakeNvml
from gpuop_sim.nodes.nvml_state import load_state


def test_error_classes_mirror_pynvml():
    err = fake_nvml.NVMLError(fake_nvml.NVML_ERROR_NOT_SUPPORTED)
    assert isinstance(err, fake_nvml.NVMLError_NotSupported)
    assert str(err) == "Not Supported"
    assert fake_nvml.NVMLError_LibraryNotFound().value == 12
    assert issubclass(fake_nvml.NVMLError_GpuIsLost, fake_nvml.NVMLError)


def test_calls_before_init_and_empty_slots(gpu_node_root):
    info = gpu_node_root("nvidia-h100x8-mig")
    nvml = FakeNvml(path=info.nvml_state_path)
    with pytest.raises(fake_nvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(1)
    assert nvml.nvmlDeviceGetMigMode(handle) == [1, 1]
    assert nvml.nvmlDeviceGetMaxMigDeviceCount(handle) == 7
    nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 1)
    with pytest.raises(fake_nvml.NVMLError_NotFound):
        nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 2)
    mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, 0)
    with pytest.raises(fake_nvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetTemperature(mig, fake_nvml.NVML_TEMPERATURE_GPU)
    assert nvml.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    nvml.nvmlShutdown()


def test_event_wait_times_out_then_delivers(gpu_node_root):
    info = gpu_node_root("nvidia-h100x8")
    nvml = FakeNvml(path=info.nvml_state_path)
    nvml.nvmlInit()
    events = nvml.nvmlEventSetCreate()
    handle = nvml.nvmlDeviceGetHandleByIndex(5)
    nvml.nvmlDeviceRegisterEvents(handle, fake_nvml.nvmlEventTypeXidCriticalError, events)
    with pytest.raises(fake_nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait(events, 0)
    uuid = nvml.nvmlDeviceGetUUID(handle)
    inject_xid(info.root, uuid, 48)
    data = nvml.nvmlEventSetWait(events, 0)
    assert (data.eventType, data.eventData) == (fake_nvml.nvmlEventTypeXidCriticalError, 48)
    assert nvml.nvmlDeviceGetUUID(data.device) == uuid
    with pytest.raises(fake_nvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait(events, 0)


def test_a_service_process_sees_the_node_and_later_faults(gpu_node_root):
    """A subprocess started with NodeRootInfo.env reads this node's GPUs and an XID injected later."""
    info = gpu_node_root("nvidia-h100x8")
    uuid = load_state(info.nvml_state_path).gpus[6].uuid
    script = textwrap.dedent(
        """
        import sys, time
        from gpuop_common.gpu import open_backends
        (backend,) = open_backends(sys.argv[1])
        print(len(backend.enumerate()), flush=True)
        backend.health()
        print("ready", flush=True)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            bad = [h.gpu_id for h in backend.health() if not h.healthy]
            if bad:
                print("unhealthy", *bad, flush=True)
                break
            time.sleep(0.05)
        """
    )
    env = {**os.environ, **info.env}
    with subprocess.Popen(
        [sys.executable, "-c", script, str(info.root)], env=env, stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "8"
        assert proc.stdout.readline().strip() == "ready"
        inject_xid(info.root, uuid, 79)
        out, _ = proc.communicate(timeout=30)
    assert out.split() == ["unhealthy", uuid]


def test_processes_outside_pods_keep_mig_mode_pending_and_compute_instances_in_use(gpu_node_root):
    info = gpu_node_root("nvidia-h100x8-mig")

    def hold(state):
        state.gpus[5].processes = [4242]  # MIG off: a CUDA program on the whole GPU
        state.gpus[1].mig_devices[1].processes = [4343]  # on GPU 1's second 3g.40gb

    update_nvml_state(info.root, hold)
    nvml = FakeNvml(path=info.nvml_state_path)
    nvml.nvmlInit()
    busy = nvml.nvmlDeviceGetHandleByIndex(5)
    # As pynvml: the call succeeds and returns the activation status; the mode stays pending.
    assert nvml.nvmlDeviceSetMigMode(busy, fake_nvml.NVML_DEVICE_MIG_ENABLE) == fake_nvml.NVML_ERROR_IN_USE
    assert nvml.nvmlDeviceGetMigMode(busy) == [0, 1]
    # Asking for the mode in force withdraws the pending change.
    assert nvml.nvmlDeviceSetMigMode(busy, fake_nvml.NVML_DEVICE_MIG_DISABLE) == fake_nvml.NVML_SUCCESS
    assert nvml.nvmlDeviceGetMigMode(busy) == [0, 0]
    idle = nvml.nvmlDeviceGetHandleByIndex(6)
    assert nvml.nvmlDeviceSetMigMode(idle, fake_nvml.NVML_DEVICE_MIG_ENABLE) == fake_nvml.NVML_SUCCESS
    assert nvml.nvmlDeviceGetMigMode(idle) == [1, 1]
    gpu1 = nvml.nvmlDeviceGetHandleByIndex(1)
    held = load_state(info.nvml_state_path).gpus[1].mig_devices[1]
    gi = nvml.nvmlDeviceGetGpuInstanceById(gpu1, held.gpu_instance_id)
    ci = nvml.nvmlGpuInstanceGetComputeInstanceById(gi, held.compute_instance_id)
    with pytest.raises(fake_nvml.NVMLError_InUse):
        nvml.nvmlComputeInstanceDestroy(ci)
    assert len(load_state(info.nvml_state_path).gpus[1].mig_devices) == 2
    nvml.nvmlShutdown()
