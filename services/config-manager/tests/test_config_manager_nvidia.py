"""The config manager on simulated H100 nodes (fake NVML): MIG layouts by the NVIDIA MIG-manager label."""

from __future__ import annotations

from gpuop_common.gpu import NvmlBackend
from gpuop_config_manager.labels import NVIDIA_STATE_LABEL, REASON_ANNOTATION, STATE_LABEL, State
from gpuop_sim.nodes.fake_nvml import FakeNvml

MIG_CONFIG = "nvidia.com/mig.config"


def _layouts(info):
    backend = NvmlBackend(FakeNvml(path=info.nvml_state_path), info.root)
    try:
        return [dict(backend.mig_writer(g.id).layout()) for g in backend.enumerate()]
    finally:
        backend.close()


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
