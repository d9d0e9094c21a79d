"""Helpers shared by the device plugin tests: a running plugin service against a kubelet emulator."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from gpuop_common.config import DevicePluginConfig
from gpuop_common.gpu import open_backends
from gpuop_common.shutdown import Stopping
from gpuop_device_plugin.manager import ResourceManager
from gpuop_device_plugin.service import DevicePluginService
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo


class PluginHandle:
    def __init__(self, service: DevicePluginService, stopping: Stopping, info: NodeRootInfo) -> None:
        self.service = service
        self.stopping = stopping
        self.info = info

    @property
    def root(self) -> Path:
        return self.info.root


@pytest.fixture
def run_plugin(
    kubelet_emulator: KubeletEmulator, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., PluginHandle]]:
    """Start the plugin service (its real loop, in a thread) for a node root; stopped after the test."""
    started: list[tuple[PluginHandle, object]] = []

    def start(info: NodeRootInfo, config: DevicePluginConfig | None = None, **kwargs: object) -> PluginHandle:
        for key, value in info.env.items():
            monkeypatch.setenv(key, value)
        manager = ResourceManager(
            open_backends(info.root), config or DevicePluginConfig(), host_root=info.root
        )
        service = DevicePluginService(
            manager,
            kubelet_emulator.socket_dir,
            cdi_dir=info.root / "var/run/cdi",
            health_interval=float(kwargs.get("health_interval", 0.1)),  # type: ignore[arg-type]
        )
        stopping = Stopping()
        thread = service.start_in_thread(stopping)
        handle = PluginHandle(service, stopping, info)
        started.append((handle, thread))
        return handle

    yield start
    for handle, thread in started:
        handle.stopping.set()
        thread.join(timeout=10)  # type: ignore[attr-defined]
        handle.service.stop()
        handle.service.manager.close()
