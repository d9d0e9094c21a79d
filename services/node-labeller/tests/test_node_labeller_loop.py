"""The running agent: hardware events relabel at once, the resync interval is not waited for, stop is
prompt; the console script works end to end with --once and --dry-run."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.probes import ProbeServer
from gpuop_common.shutdown import ServiceContext, Stopping
from gpuop_node_labeller.events import Trigger, relevant
from gpuop_node_labeller.main import next_pass_in, serve
from gpuop_node_labeller.settings import LabellerSettings
from gpuop_sim.nodes import NodeRootInfo
from gpuop_sim.nodes.faults import amd_device_dir

SCRIPT = Path(sys.executable).parent / "gpuop-node-labeller"


def wait_until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.05)


class FakeEvents:
    """Stands in for udev (which cannot be pointed at a fixture sysfs): tests fire events by hand."""

    def __init__(self) -> None:
        self.fire: Callable[[str], None] | None = None
        self.stopped = False

    def start(self, fire: Callable[[str], None]) -> bool:
        self.fire = fire
        return True

    def stop(self) -> None:
        self.stopped = True


def test_relevant_events() -> None:
    assert relevant("change", "drm", "card3", {})
    assert relevant("remove", "pci", "0000:05:00.0", {"PCI_ID": "1002:74A1"})
    assert relevant("add", "pci", "0000:18:00.0", {"PCI_ID": "10de:2330"})
    assert not relevant("add", "pci", "0000:00:1f.0", {"PCI_ID": "8086:A0A3"})
    assert relevant("add", "module", "amdgpu", {})
    assert not relevant("add", "module", "snd_hda_intel", {})
    assert not relevant("add", "net", "eth0", {})


def test_trigger_collects_a_burst_and_wakes_on_stop() -> None:
    stopping = Stopping()
    trigger = Trigger(stopping)
    for n in range(5):
        trigger.fire(f"udev change drm card{n}")
    assert len(trigger.wait(10, settle=0.01)) == 5
    assert trigger.wait(0.01) == []
    # A device flapping forever still lets a pass through once the bounded settle time is over.
    flapping = threading.Event()

    def flap() -> None:
        while not flapping.is_set():
            trigger.fire("udev change drm card0")
            time.sleep(0.005)

    threading.Thread(target=flap, daemon=True).start()
    try:
        assert trigger.wait(10, settle=0.02)
    finally:
        flapping.set()
    trigger.wait(0)
    threading.Timer(0.05, stopping.set).start()
    started = time.monotonic()
    trigger.wait(30)
    assert time.monotonic() - started < 10


def test_hardware_event_relabels_without_waiting_for_the_resync(
    gpu_node_root: Callable[..., NodeRootInfo],
    nodes: Any,
    sim_kubeconfig: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    info = gpu_node_root("amd-mi300x-spx")
    nodes.create("gpu-node")
    settings = LabellerSettings(
        host_root=info.root,
        node_name="gpu-node",
        kubeconfig=sim_kubeconfig,
        interval=3600,
        settle_seconds=0.05,
    )
    stopping = Stopping()
    probes = ProbeServer("127.0.0.1", 0)
    events = FakeEvents()
    result: list[int] = []
    ctx = ServiceContext(settings=settings, stopping=stopping, probes=probes)
    thread = threading.Thread(target=lambda: result.append(serve(ctx, events)))
    thread.start()
    try:
        wait_until(lambda: nodes.labels("gpu-node").get("gpuop.dev/gpu.partition.compute") == "spx")
        wait_until(lambda: probes.ready)  # the pass ends (GPUHealthy written) after the labels land
        for gpu in info.pci_addresses:
            (amd_device_dir(info.root, gpu) / "current_compute_partition").write_text("DPX\n")
        assert events.fire is not None
        events.fire("udev change drm card0")
        wait_until(lambda: nodes.labels("gpu-node").get("gpuop.dev/gpu.partition.compute") == "dpx")
        assert nodes.labels("gpu-node")["amd.com/gpu.compute-memory-partition"] == "dpx_nps1"
    finally:
        stopping.set()
        thread.join(10)
    assert result == [0]
    assert events.stopped


def test_after_a_failed_pass_the_next_comes_sooner_than_the_interval() -> None:
    assert next_pass_in(60.0, 0) == 60.0
    assert [next_pass_in(60.0, n) for n in range(1, 6)] == [5.0, 10.0, 20.0, 40.0, 60.0]
    assert next_pass_in(60.0, 40) == 60.0  # no overflow, capped at the interval
    assert next_pass_in(2.0, 1) == 2.0  # an interval shorter than the first retry stays


def test_a_first_pass_that_fails_is_retried_before_the_interval(
    gpu_node_root: Callable[..., NodeRootInfo], nodes: Any, sim_kubeconfig: Path
) -> None:
    """The Node object is not there yet (a pass fails: the label PATCH answers 404): with an
    interval of an hour, the labels still land once the Node exists, at the first retry."""
    info = gpu_node_root("amd-single")
    settings = LabellerSettings(
        host_root=info.root, node_name="late-node", kubeconfig=sim_kubeconfig, interval=3600
    )
    stopping = Stopping()
    probes = ProbeServer("127.0.0.1", 0)
    ctx = ServiceContext(settings=settings, stopping=stopping, probes=probes)
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(serve(ctx, FakeEvents())))
    thread.start()
    try:
        wait_until(lambda: probes.ready_reason.startswith("labelling failed"), timeout=30)
        nodes.create("late-node")
        wait_until(lambda: nodes.labels("late-node").get("gpuop.dev/gpu.vendor") == "amd", timeout=60)
    finally:
        stopping.set()
        thread.join(10)
    assert result == [0]


def run_script(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
        check=False,
    )


def test_console_script_once_labels_the_node(
    gpu_node_root: Callable[..., NodeRootInfo], nodes: Any, sim_kubeconfig: Path
) -> None:
    info = gpu_node_root("nvidia-h100x8", "gpu-node")
    nodes.create("gpu-node")
    done = run_script(
        "--once", f"--host-root={info.root}", f"--kubeconfig={sim_kubeconfig}", "--probe-port=0",
        "--bind-address=127.0.0.1", "--mig-strategy=single",
        env={**info.env, "NODE_NAME": "gpu-node"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    labels = nodes.labels("gpu-node")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["gpuop.dev/gpu.vendor"] == "nvidia"


def test_console_script_dry_run_prints_the_diff_only(
    gpu_node_root: Callable[..., NodeRootInfo], nodes: Any, sim_kubeconfig: Path, sim_apiserver: Any
) -> None:
    info = gpu_node_root("amd-single")
    nodes.create("gpu-node", {"gpuop.dev/gpu.count": "2"})
    done = run_script(
        "--once", "--dry-run", f"--host-root={info.root}", f"--kubeconfig={sim_kubeconfig}",
        "--probe-port=0", "--bind-address=127.0.0.1", "--node-name=gpu-node",
        env=info.env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "~ gpuop.dev/gpu.count=2 -> 1" in done.stdout
    assert "+ amd.com/gpu.product-name=AMD_Radeon_Instinct_MI25" in done.stdout
    assert sim_apiserver.stats().get(("patch", "nodes"), 0) == 0


def test_console_script_without_node_name_exits_with_a_clear_error(
    gpu_node_root: Callable[..., NodeRootInfo],
) -> None:
    info = gpu_node_root("amd-single")
    env = {k: v for k, v in {**os.environ, **info.env}.items() if k not in ("NODE_NAME", "GPUOP_NODE_NAME")}
    done = subprocess.run(
        [str(SCRIPT), "--once", f"--host-root={info.root}", "--probe-port=0", "--bind-address=127.0.0.1"],
        capture_output=True, text=True, timeout=60, check=False, env=env,
    )  # fmt: skip
    assert done.returncode == 2
    assert "no node name" in done.stderr


def test_bad_flag_value_names_the_flag() -> None:
    done = run_script("--mig-strategy=sometimes", env={})
    assert done.returncode == 2
    assert "--mig-strategy" in done.stderr
