"""Against the simulated API server: labels land on the Node, steady state writes nothing, stale
labels go, foreign ones stay, and injected 409/500 answers on the PATCH are retried to convergence."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpuop_node_labeller import LabelOptions, labels_for
from gpuop_node_labeller.agent import NodeLabeller
from gpuop_node_labeller.ownership import OWNED_ANNOTATION
from gpuop_sim.apiserver import SimApiServer
from gpuop_sim.nodes import NodeRootInfo, set_garbage
from gpuop_sim.nodes.faults import amd_device_dir

NodeGpus = Callable[..., tuple[NodeRootInfo, list[Any]]]


def patches(server: SimApiServer) -> int:
    """Label PATCHes (the GPUHealthy condition goes to nodes/status, counted in test_node_labeller_health)."""
    return sum(1 for r in server.requests() if r.method == "PATCH" and not r.path.endswith("/status"))


def make_labeller(info: NodeRootInfo, api: Any, name: str = "gpu-node", **kwargs: Any) -> NodeLabeller:
    options = kwargs.pop("options", LabelOptions())
    return NodeLabeller(host_root=info.root, node_name=name, api=api, options=lambda: options, **kwargs)


@pytest.fixture
def mi300x(node_gpus: NodeGpus, nodes: Any) -> tuple[NodeRootInfo, dict[str, str]]:
    info, gpus = node_gpus("amd-mi300x-cpx")
    nodes.create("gpu-node", {"kubernetes.io/hostname": "gpu-node", "team": "ml"})
    return info, labels_for(gpus)


def test_labels_appear_on_the_node_and_steady_state_writes_nothing(
    mi300x: tuple[NodeRootInfo, dict[str, str]], nodes: Any, sim_apiserver: SimApiServer, kube_api_client: Any
) -> None:
    info, expected = mi300x
    labeller = make_labeller(info, kube_api_client)
    first = labeller.run_once()
    assert first.written
    assert nodes.labels("gpu-node") == {**expected, "kubernetes.io/hostname": "gpu-node", "team": "ml"}
    assert nodes.annotations("gpu-node")[OWNED_ANNOTATION] == ",".join(sorted(expected))
    assert patches(sim_apiserver) == 1
    for _ in range(5):
        assert not labeller.run_once().written
    assert patches(sim_apiserver) == 1
    registry = labeller.metrics.registry
    assert registry.get_sample_value("gpuop_node_labeller_label_patches_total") == 1
    assert registry.get_sample_value("gpuop_node_labeller_passes_total", {"result": "ok"}) == 6
    assert registry.get_sample_value("gpuop_node_labeller_labels") == len(expected)
    assert registry.get_sample_value("gpuop_node_labeller_gpus") == 8


def test_partition_switch_relabels_and_foreign_labels_stay(
    mi300x: tuple[NodeRootInfo, dict[str, str]], nodes: Any, kube_api_client: Any
) -> None:
    info, _expected = mi300x
    make_labeller(info, kube_api_client).run_once()
    # Someone else writes a label under our prefix; then the GPUs change partition mode.
    nodes.patch_labels("gpu-node", {"amd.com/gpu.custom": "mine"})
    for gpu in info.pci_addresses:
        (amd_device_dir(info.root, gpu) / "current_compute_partition").write_text("SPX\n")
    make_labeller(info, kube_api_client).run_once()
    labels = nodes.labels("gpu-node")
    assert labels["amd.com/gpu.compute-memory-partition"] == "spx_nps4"
    assert labels["gpuop.dev/gpu.partition.compute"] == "spx"
    assert labels["amd.com/gpu.custom"] == "mine"
    assert labels["team"] == "ml"


def test_label_no_longer_computed_is_removed(
    mi300x: tuple[NodeRootInfo, dict[str, str]], nodes: Any, kube_api_client: Any
) -> None:
    info, _expected = mi300x
    make_labeller(info, kube_api_client).run_once()
    assert nodes.labels("gpu-node")["amd.com/gpu.driver-version"] == "6.10.5"
    set_garbage(info.root, "sys/module/amdgpu/version", "???\n")
    make_labeller(info, kube_api_client).run_once()
    labels = nodes.labels("gpu-node")
    assert "amd.com/gpu.driver-version" not in labels
    assert "gpuop.dev/gpu.driver-version" not in labels
    assert labels["amd.com/gpu.cu-count"] == "38"
    assert "amd.com/gpu.driver-version" not in nodes.annotations("gpu-node")[OWNED_ANNOTATION]


@pytest.mark.parametrize("code", [409, 500])
def test_injected_patch_failure_is_retried_and_converges(
    mi300x: tuple[NodeRootInfo, dict[str, str]],
    nodes: Any,
    sim_apiserver: SimApiServer,
    kube_api_client: Any,
    code: int,
) -> None:
    info, expected = mi300x
    sim_apiserver.faults.fail_next("patch", "nodes", code)
    result = make_labeller(info, kube_api_client).run_once()
    assert result.written
    assert patches(sim_apiserver) == 2  # the failed one and the retry
    labels = nodes.labels("gpu-node")
    assert {k: labels.get(k) for k in expected} == expected


def test_concurrent_change_between_read_and_write_is_not_lost(
    mi300x: tuple[NodeRootInfo, dict[str, str]], nodes: Any, kube_api_client: Any
) -> None:
    info, _expected = mi300x
    labeller = make_labeller(info, kube_api_client)
    labeller.run_once()
    # A label ours wrote is overwritten by hand; the next pass puts it back, one key only.
    nodes.patch_labels("gpu-node", {"gpuop.dev/gpu.count": "9"})
    result = labeller.run_once()
    assert result.plan.set == {"gpuop.dev/gpu.count": "8"}
    assert nodes.labels("gpu-node")["gpuop.dev/gpu.count"] == "8"


def test_dry_run_prints_the_diff_and_writes_nothing(
    mi300x: tuple[NodeRootInfo, dict[str, str]], nodes: Any, sim_apiserver: SimApiServer, kube_api_client: Any
) -> None:
    info, expected = mi300x
    out = io.StringIO()
    result = make_labeller(info, kube_api_client, dry_run=True, out=out).run_once()
    assert not result.written
    assert patches(sim_apiserver) == 0
    text = out.getvalue().splitlines()
    assert text[0] == f"node gpu-node: {len(expected)} label change(s)"
    assert "+ amd.com/gpu.compute-memory-partition=cpx_nps4" in text
    assert "amd.com/gpu.family" not in nodes.labels("gpu-node")


def test_config_change_reaches_the_next_pass(
    mi300x: tuple[NodeRootInfo, dict[str, str]], nodes: Any, kube_api_client: Any, tmp_path: Path
) -> None:
    from gpuop_common.shutdown import Stopping
    from gpuop_node_labeller.events import Trigger
    from gpuop_node_labeller.main import ConfigState
    from gpuop_node_labeller.settings import LabellerSettings

    info, _ = mi300x
    config = tmp_path / "config.yaml"
    config.write_text("labelSets: [amd, neutral]\n")
    stopping = Stopping()
    trigger = Trigger(stopping)
    state = ConfigState(LabellerSettings(config_file=config), trigger)
    assert state.watcher is not None
    state.load_initial()
    labeller = NodeLabeller(
        host_root=info.root, node_name="gpu-node", api=kube_api_client, options=state.options
    )
    labeller.run_once()
    assert "beta.amd.com/gpu.family" in nodes.labels("gpu-node")
    config.write_text("labelSets: [neutral]\nbetaLabels: false\nintervalSeconds: 30\n")
    assert state.watcher.poll()
    assert trigger.wait(0) == ["config changed"]
    assert state.interval() == 30
    labeller.run_once()
    labels = nodes.labels("gpu-node")
    assert not [k for k in labels if k.startswith(("amd.com/", "beta.amd.com/"))]
    assert labels["gpuop.dev/gpu.partition.compute"] == "cpx"
    stopping.set()


def test_missing_node_fails_the_pass_without_retrying(
    node_gpus: NodeGpus, sim_apiserver: SimApiServer, kube_api_client: Any
) -> None:
    from kubernetes.client.exceptions import ApiException

    info, _ = node_gpus("amd-single")
    labeller = make_labeller(info, kube_api_client, name="no-such-node")
    with pytest.raises(ApiException) as raised:
        labeller.run_once()
    assert raised.value.status == 404
    assert sim_apiserver.stats().get(("get", "nodes"), 0) == 1  # a 404 is not worth retrying
    assert (
        labeller.metrics.registry.get_sample_value("gpuop_node_labeller_passes_total", {"result": "failed"})
        == 1
    )


def test_driver_reload_without_an_event_does_not_drop_the_gpus(
    node_gpus: NodeGpus, nodes: Any, sim_apiserver: SimApiServer, kube_api_client: Any
) -> None:
    from gpuop_sim.nodes.fake_nvml import FakeNvml
    from gpuop_sim.nodes.fake_nvml_api import NVML_ERROR_GPU_IS_LOST, NVMLError

    class ReloadedDriverNvml(FakeNvml):
        """Handles of the session open before a driver reload answer GPU_IS_LOST; a new session works."""

        stale = False

        def nvmlInitWithFlags(self, flags: int) -> None:  # noqa: N802 - NVML's name
            super().nvmlInitWithFlags(flags)
            self.stale = False

        def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:  # noqa: N802
            if self.stale:
                raise NVMLError(NVML_ERROR_GPU_IS_LOST)
            return super().nvmlDeviceGetHandleByIndex(index)

    info, _ = node_gpus("nvidia-h100x8", "gpu-node")
    assert info.nvml_state_path is not None
    nvml = ReloadedDriverNvml(path=info.nvml_state_path)
    nodes.create("gpu-node")
    labeller = make_labeller(info, kube_api_client, nvml=nvml)
    labeller.run_once()
    assert nodes.labels("gpu-node")["nvidia.com/gpu.count"] == "8"
    nvml.stale = True  # the driver was reloaded; no udev event reached us
    result = labeller.run_once()
    assert not result.written
    assert result.labels["nvidia.com/gpu.count"] == "8"
    assert patches(sim_apiserver) == 1
