"""The console script as a real process: registers, serves /healthz, hot-reloads, cleans up on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo

MakeRoot = Callable[..., NodeRootInfo]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Plugin:
    def __init__(self, proc: subprocess.Popen[str], port: int, config: Path) -> None:
        self.proc = proc
        self.config = config
        self.port = port
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)

    def get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as response:
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)
        except OSError:
            return 0


@pytest.fixture
def start_process(kubelet_emulator: KubeletEmulator, tmp_path: Path) -> Iterator[Callable[..., Plugin]]:
    procs: list[Plugin] = []

    def start(info: NodeRootInfo, config_yaml: str | None = None, *extra: str) -> Plugin:
        config = tmp_path / "config.yaml"
        if config_yaml is not None:
            config.write_text(config_yaml)
        port = free_port()
        args = [
            sys.executable, "-m", "gpuop_device_plugin.main",
            f"--host-root={info.root}", f"--socket-dir={kubelet_emulator.socket_dir}",
            f"--config-file={config}", "--config-poll-interval=0.2", f"--cdi-spec-dir={tmp_path / 'cdi'}",
            "--bind-address=127.0.0.1", f"--probe-port={port}", "--node-name=node-a", "--no-udev", *extra,
        ]  # fmt: skip
        env = {**os.environ, **info.env}
        proc = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        plugin = Plugin(proc, port, config)
        procs.append(plugin)
        return plugin

    yield start
    for plugin in procs:
        if plugin.proc.poll() is None:
            plugin.proc.kill()
        plugin.proc.wait(timeout=10)


def wait_until(predicate: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met")
        time.sleep(0.05)


def test_process_registers_serves_probes_and_removes_sockets_on_sigterm(
    gpu_node_root: MakeRoot, start_process: Callable[..., Plugin], kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-mi300x-cpx")
    plugin = start_process(info, "resourceNamingStrategy: mixed\n")
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == {"amd.com/cpx_nps4": 63}, timeout=30)
    wait_until(lambda: plugin.get("/readyz") == 200, timeout=10)
    assert plugin.get("/healthz") == 200
    sock = Path(kubelet_emulator.socket_dir) / "amd.com_cpx_nps4"
    assert sock.is_socket()
    # Hot reload from the ConfigMap file: back to a single amd.com/gpu resource.
    plugin.config.write_text("resourceNamingStrategy: single\n")
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("amd.com/gpu") == 63, timeout=10)
    plugin.proc.send_signal(signal.SIGTERM)
    assert plugin.proc.wait(timeout=20) == 0
    leftovers = {p.name for p in Path(kubelet_emulator.socket_dir).iterdir()}
    assert "amd.com_gpu" not in leftovers and "amd.com_cpx_nps4" not in leftovers
    assert "kubelet.sock" in leftovers
    records = [json.loads(line) for line in plugin.lines if line.startswith("{")]
    assert any(
        r["message"] == "registered with the kubelet" and r["service"] == "device-plugin" for r in records
    )


def test_bad_config_file_is_reported_and_defaults_used(
    gpu_node_root: MakeRoot, start_process: Callable[..., Plugin], kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root("amd-single")
    plugin = start_process(info, "resourceNamingStrategy: bogus\n")
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable() == {"amd.com/gpu": 1}, timeout=30)
    wait_until(lambda: any("resourceNamingStrategy" in line for line in plugin.lines), timeout=10)
    wait_until(lambda: plugin.get("/readyz") == 503, timeout=10)  # the config check fails readiness


def test_bad_flag_exits_2_naming_it(gpu_node_root: MakeRoot, start_process: Callable[..., Plugin]) -> None:
    plugin = start_process(gpu_node_root("amd-single"), None, "--health-interval=abc")
    assert plugin.proc.wait(timeout=20) == 2
    wait_until(lambda: any("--health-interval" in line for line in plugin.lines), timeout=5)


def test_once_registers_and_exits_zero(
    gpu_node_root: MakeRoot, start_process: Callable[..., Plugin], kubelet_emulator: KubeletEmulator
) -> None:
    plugin = start_process(gpu_node_root("nvidia-h100x8"), None, "--once")
    assert plugin.proc.wait(timeout=30) == 0
    # It registered (the kubelet knows the resource) and removed its socket on the way out.
    assert "nvidia.com/gpu" in kubelet_emulator.capacity()
    assert not (Path(kubelet_emulator.socket_dir) / "nvidia-gpu.sock").exists()
