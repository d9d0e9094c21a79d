"""A running DRA driver (its real loop, in a thread) against the kubelet emulator and the sim API server."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.gpu import open_backends
from gpuop_common.kubejson import NODES, RESOURCECLAIMS, KubeJson
from gpuop_common.shutdown import Stopping
from gpuop_dra_driver import DRIVER_NAME
from gpuop_dra_driver.checkpoint import Checkpoint
from gpuop_dra_driver.driver import DraDriver, api_claim_reader
from gpuop_dra_driver.healthfeed import HealthFeed, health_timeout_s
from gpuop_dra_driver.inventory import Inventory
from gpuop_dra_driver.publisher import SlicePublisher
from gpuop_dra_driver.server import PluginSockets
from gpuop_dra_driver.service import DriverService
from gpuop_sim.kubelet import DraClaim, KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo

NODE = "gpu-node-1"
_uids = itertools.count(1)


@dataclass
class DriverHandle:
    service: DriverService
    driver: DraDriver
    sockets: PluginSockets
    info: NodeRootInfo
    stopping: Stopping
    thread: Any
    kubelet: KubeletEmulator
    stopped: bool = False

    @property
    def cdi_dir(self) -> Path:
        return self.driver.cdi_dir

    def stop(self) -> None:
        stop_driver(self)


@pytest.fixture
def kube(kube_api_client: Any) -> KubeJson:
    api = KubeJson(kube_api_client)
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    return api


class ClaimFactory:
    def __init__(self, api: KubeJson) -> None:
        self.api = api

    def make(
        self,
        results: list[dict[str, str]] | None,
        *,
        requests: tuple[str, ...] = ("gpu",),
        namespace: str = "default",
    ) -> DraClaim:
        """A ResourceClaim in the API server, allocated with `results` (None: left unallocated)."""
        return make_claim(self.api, results, requests=requests, namespace=namespace)


@pytest.fixture
def claims(kube: KubeJson) -> ClaimFactory:
    return ClaimFactory(kube)


def make_claim(
    api: KubeJson,
    results: list[dict[str, str]] | None,
    *,
    requests: tuple[str, ...] = ("gpu",),
    namespace: str = "default",
) -> DraClaim:
    name = f"claim-{next(_uids)}"
    claim = api.create(
        RESOURCECLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [{"name": r, "exactly": {"deviceClassName": DRIVER_NAME}} for r in requests]
                }
            },
        },
        namespace,
    )
    if results is not None:
        claim = api.replace_status(RESOURCECLAIMS, claim, {"allocation": {"devices": {"results": results}}})
    return DraClaim(namespace, claim["metadata"]["uid"], name)


def result(
    device: str, *, request: str = "gpu", pool: str = NODE, driver: str = DRIVER_NAME
) -> dict[str, str]:
    return {"request": request, "driver": driver, "pool": pool, "device": device}


@pytest.fixture
def run_driver(
    kubelet_emulator: KubeletEmulator, kube: KubeJson, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., DriverHandle]]:
    started: list[DriverHandle] = []

    def start(info: NodeRootInfo, *, publish: bool = True, rescan_interval: float = 30.0) -> DriverHandle:
        for key, value in info.env.items():
            monkeypatch.setenv(key, value)
        root = kubelet_emulator.root
        plugins = root / "var/lib/kubelet/plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        kubelet_emulator.plugins_registry.mkdir(parents=True, exist_ok=True)
        inventory = Inventory(open_backends(info.root), rescan_interval)
        driver = DraDriver(
            driver=DRIVER_NAME,
            node=NODE,
            cdi_dir=info.root / "var/run/cdi",
            checkpoint=Checkpoint(plugins / DRIVER_NAME / "checkpoint.json"),
            read_claim=api_claim_reader(kube),
            devices=inventory.devices,
        )
        interval = 0.1
        health = HealthFeed(health_timeout_s(interval))
        sockets = PluginSockets(driver, plugins, kubelet_emulator.plugins_registry, health)
        publisher = SlicePublisher(kube, NODE, DRIVER_NAME) if publish else None
        service = DriverService(inventory, sockets, publisher, interval=interval)
        service.tick()  # the first inventory before the sockets come up, as main() does
        stopping = Stopping()
        thread = service.start_in_thread(stopping)
        handle = DriverHandle(service, driver, sockets, info, stopping, thread, kubelet_emulator)
        started.append(handle)
        return handle

    yield start
    for handle in started:
        stop_driver(handle)


def stop_driver(handle: DriverHandle) -> None:
    """Stop like SIGTERM does: loop ends, sockets go; the checkpoint and CDI specs stay on disk."""
    if handle.stopped:
        return
    handle.stopped = True
    handle.stopping.set()
    handle.thread.join(timeout=10)
    handle.sockets.stop()
    handle.service.inventory.close()
