"""The config manager on simulated H100 nodes (fake NVML): MIG layouts by the NVIDIA MIG-manager label.

Node `nvidia-h100x8-mig`: MIG on GPUs 0-2 (7x1g.10gb, 2x3g.40gb, 3g.40gb+2g.20gb+1g.10gb), off on 3-7.
"""

from __future__ import annotations

from gpuop_common.gpu import NvmlBackend
from gpuop_config_manager.labels import (
    NVIDIA_STATE_LABEL,
    PAUSE,
    PAUSED,
    PROGRESS_ANNOTATION,
    REASON_ANNOTATION,
    STATE_LABEL,
    State,
    profile_digest,
)
from gpuop_config_manager.progress import Progress
from gpuop_sim.nodes import update_nvml_state
from gpuop_sim.nodes.fake_nvml import FakeNvml
from gpuop_sim.nodes.nvml_state import load_state
from kubernetes import client

MIG_CONFIG = "nvidia.com/mig.config"
DP = "gpuop.dev/deploy.device-plugin"
ME = "gpuop.dev/deploy.metrics-exporter"
TR = "gpuop.dev/deploy.test-runner"
FIXTURE_LAYOUT = [{"1g.10gb": 7}, {"3g.40gb": 2}, {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}] + [{}] * 5
AS_FIXTURE = {
    "name": "as-fixture",
    "nvidia": [
        {"devices": [0], "migEnabled": True, "migDevices": {"1g.10gb": 7}},
        {"devices": [1], "migEnabled": True, "migDevices": {"3g.40gb": 2}},
        {"devices": [2], "migEnabled": True, "migDevices": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
        {"devices": [3, 4, 5, 6, 7], "migEnabled": False},
    ],
}


def _layouts(info):
    backend = NvmlBackend(FakeNvml(path=info.nvml_state_path), info.root)
    try:
        return [dict(backend.mig_writer(g.id).layout()) for g in backend.enumerate()]
    finally:
        backend.close()


def _uuids(info):
    return [gpu.uuid for gpu in load_state(info.nvml_state_path).gpus]


def _half_done(info):
    """GPUs left with a pending MIG mode or a GPU instance without its compute instance."""
    found = []
    for index, gpu in enumerate(load_state(info.nvml_state_path).gpus):
        with_ci = {m.gpu_instance_id for m in gpu.mig_devices}
        if gpu.mig_pending != gpu.mig_current or any(gi.id not in with_ci for gi in gpu.gpu_instances):
            found.append(index)
    return found


def _gpu_pod(resource):
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="trainer", namespace="default"),
        spec=client.V1PodSpec(
            node_name="gpu-node",
            containers=[
                client.V1Container(
                    name="main", image="x", resources=client.V1ResourceRequirements(limits={resource: "1"})
                )
            ],
        ),
    )


def test_all_1g_then_all_disabled(harness):
    h = harness("nvidia-h100x8-mig", {MIG_CONFIG: "all-1g.10gb"})
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS and outcome.changed
    assert h.kube.states() == ["pending", "quiescing", "applying", "success"]
    nvidia_states = [p[NVIDIA_STATE_LABEL] for p in h.kube.label_patches if NVIDIA_STATE_LABEL in p]
    assert nvidia_states == ["pending", "success"]  # the MIG manager's values; the rest are no-ops
    assert _layouts(h.info) == [{"1g.10gb": 7}] * 8
    h.label(**{MIG_CONFIG: "all-disabled"})
    assert h.agent().run_once().state is State.SUCCESS
    assert _layouts(h.info) == [{}] * 8
    assert h.node().labels[NVIDIA_STATE_LABEL] == "success"


def test_layout_that_does_not_fit_is_refused_before_any_change(harness):
    h = harness("nvidia-h100x8-mig", {MIG_CONFIG: "too-big"})
    before = _layouts(h.info)
    outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    node = h.node()
    assert "has no placement on NVIDIA H100 80GB HBM3" in node.annotations[REASON_ANNOTATION]
    assert node.labels[STATE_LABEL] == "failed" and node.labels[NVIDIA_STATE_LABEL] == "failed"
    assert _layouts(h.info) == before


def test_apply_pauses_the_operands_and_restores_them(harness):
    h = harness("nvidia-h100x8-mig", {MIG_CONFIG: "all-1g.10gb"})
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS and outcome.changed
    quiescing = next(p for p in h.kube.label_patches if p.get(STATE_LABEL) == "quiescing")
    assert quiescing[DP] == PAUSED and quiescing[ME] == PAUSED and TR not in quiescing  # false stays false
    success = next(p for p in h.kube.label_patches if p.get(STATE_LABEL) == "success")
    assert (success[DP], success[ME]) == ("true", "true")  # back in the same patch as `success`
    node = h.node()
    assert {k: node.labels[k] for k in h.DEPLOY} == h.DEPLOY
    assert node.labels[STATE_LABEL] == "success" and node.labels[NVIDIA_STATE_LABEL] == "success"
    assert PROGRESS_ANNOTATION not in node.annotations and REASON_ANNOTATION not in node.annotations
    assert h.events() == ["ConfigPending", "Quiescing", "ApplyingConfig", "ConfigApplied"]
    assert _layouts(h.info) == [{"1g.10gb": 7}] * 8 and _half_done(h.info) == []
    # What the device plugin lists: 56 MIG devices of 1g.10gb.
    backend = NvmlBackend(FakeNvml(path=h.info.nvml_state_path), h.info.root)
    try:
        migs = [m for gpu in backend.enumerate() for m in gpu.mig_devices]
    finally:
        backend.close()
    assert len(migs) == 56 and {m.profile for m in migs} == {"1g.10gb"}
    # Steady state: nothing written on the next passes.
    writes = h.kube.writes
    for _ in range(2):
        assert not h.agent().run_once().changed
    assert h.kube.writes == writes


def test_matching_node_is_a_no_op_with_one_success_label(harness):
    h = harness("nvidia-h100x8-mig", {MIG_CONFIG: "as-fixture"}, profiles=[AS_FIXTURE])
    nvml_before = h.info.nvml_state_path.read_text()
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS and not outcome.changed
    assert h.kube.states() == ["success"]
    node = h.node()
    assert node.labels[NVIDIA_STATE_LABEL] == "success"
    assert {k: node.labels[k] for k in h.DEPLOY} == h.DEPLOY
    assert h.events() == ["ConfigAlreadyApplied"]
    assert h.info.nvml_state_path.read_text() == nvml_before  # not one NVML write
    writes = h.kube.writes
    assert h.agent().run_once().state is State.SUCCESS and h.kube.writes == writes


def test_gpu_pod_that_never_leaves_times_out_and_operands_come_back(harness):
    h = harness("nvidia-h100x8-mig", {MIG_CONFIG: "all-1g.10gb"}, quiesceTimeoutSeconds=1)
    h.core.create_namespaced_pod("default", _gpu_pod("nvidia.com/mig-3g.40gb"))
    nvml_before = h.info.nvml_state_path.read_text()
    outcome = h.agent().run_once()
    assert outcome.state is State.FAILED
    assert "timed out after 1s waiting for pods to leave the node: default/trainer" in outcome.reason
    node = h.node()
    assert node.annotations[REASON_ANNOTATION] == outcome.reason
    assert node.labels[STATE_LABEL] == "failed" and node.labels[NVIDIA_STATE_LABEL] == "failed"
    assert {k: node.labels[k] for k in h.DEPLOY} == h.DEPLOY and PROGRESS_ANNOTATION not in node.annotations
    assert h.kube.states() == ["pending", "quiescing", "failed"]
    assert h.events()[-1] == "QuiesceTimeout"
    assert h.info.nvml_state_path.read_text() == nvml_before and _layouts(h.info) == FIXTURE_LAYOUT


def test_restart_mid_apply_resumes_and_never_stays_applying(harness):
    h = harness("nvidia-h100x8", {MIG_CONFIG: "all-1g.10gb"})
    profile = next(p for p in h.config.profiles if p.name == "all-1g.10gb")
    progress = Progress(profile="all-1g.10gb", digest=profile_digest(profile), phase="applying", started=0.0)
    h.core.patch_node(
        h.NODE,
        {"metadata": {"labels": {DP: PAUSED, ME: PAUSED, STATE_LABEL: "applying"},
                      "annotations": {PROGRESS_ANNOTATION: progress.dump(), PAUSE.annotation: f"{DP},{ME}"}}},
    )  # fmt: skip
    # The pod died after writing GPUs 0-3, and on GPU 4 between a GPU instance and its compute instance.
    nvml = FakeNvml(path=h.info.nvml_state_path)
    backend = NvmlBackend(nvml, h.info.root)
    gpus = backend.enumerate()
    for gpu in gpus[:4]:
        backend.mig_writer(gpu.id).apply(True, {"1g.10gb": 7})
    backend.mig_writer(gpus[4].id).set_mode(True)
    handle = nvml.nvmlDeviceGetHandleByUUID(gpus[4].id)
    nvml.nvmlDeviceCreateGpuInstance(handle, nvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE)
    backend.close()
    assert _half_done(h.info) == [4]
    h.restart()
    outcome = h.agent().run_once()
    assert outcome.state is State.SUCCESS and outcome.changed
    node = h.node()
    assert node.labels[STATE_LABEL] == "success" and node.labels[NVIDIA_STATE_LABEL] == "success"
    assert PROGRESS_ANNOTATION not in node.annotations
    assert {k: node.labels[k] for k in h.DEPLOY} == h.DEPLOY
    assert _layouts(h.info) == [{"1g.10gb": 7}] * 8 and _half_done(h.info) == []
    assert h.events() == ["ConfigResumed", "ApplyingConfig", "ConfigApplied"]


def _failed_and_put_back(h, gpu_uuid: str, nvml_call: str):
    """Run the agent once: `failed`, the reason naming the GPU, the refused call and NVMLError_InUse
    and saying the GPU was put back, the operands restored. Returns the node's metadata."""
    assert h.agent().run_once().state is State.FAILED
    node = h.node()
    reason = node.annotations[REASON_ANNOTATION]
    assert gpu_uuid in reason and nvml_call in reason and "NVMLError_InUse" in reason
    assert reason.endswith("the GPU was put back as it was")
    assert node.labels[NVIDIA_STATE_LABEL] == "failed"
    assert {k: node.labels[k] for k in h.DEPLOY} == h.DEPLOY and PROGRESS_ANNOTATION not in node.annotations
    return node


def test_mig_mode_change_refused_is_failed_and_the_gpu_keeps_its_mode(harness):
    h = harness("nvidia-h100x8-mig", {MIG_CONFIG: "all-1g.10gb"})
    busy = _uuids(h.info)[5]
    update_nvml_state(h.info.root, lambda s: setattr(s.gpus[5], "processes", [4242]))  # a CUDA program
    node = _failed_and_put_back(h, busy, "nvmlDeviceSetMigMode")
    assert node.labels[STATE_LABEL] == "failed"
    assert h.kube.states() == ["pending", "quiescing", "applying", "failed"]
    assert h.events()[-1] == "ConfigFailed"
    # GPUs 0-4 took the layout; GPU 5 is MIG off with no change left pending for its next reset;
    # GPUs 6-7 were not reached.
    assert _layouts(h.info) == [{"1g.10gb": 7}] * 5 + [{}] * 3 and _half_done(h.info) == []
    # Usable: once the program is gone, a new request applies.
    update_nvml_state(h.info.root, lambda s: setattr(s.gpus[5], "processes", []))
    h.label(**{MIG_CONFIG: "all-disabled"})
    assert h.agent().run_once().state is State.SUCCESS
    assert _layouts(h.info) == [{}] * 8


def test_compute_instance_in_use_is_failed_and_the_gpu_keeps_its_layout(harness):
    h = harness("nvidia-h100x8-mig", {MIG_CONFIG: "all-1g.10gb"})
    busy = _uuids(h.info)[1]
    # A program outside Kubernetes on GPU 1's second 3g.40gb (destroyed after the first).
    update_nvml_state(h.info.root, lambda s: setattr(s.gpus[1].mig_devices[1], "processes", [4343]))
    _failed_and_put_back(h, busy, "nvmlComputeInstanceDestroy")
    # GPU 0 already matched; GPU 1 is put back as it was (its first 3g.40gb made again); 2-7 untouched.
    assert _layouts(h.info) == FIXTURE_LAYOUT and _half_done(h.info) == []
