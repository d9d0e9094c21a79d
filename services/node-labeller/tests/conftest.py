"""Shared helpers for the node labeller tests: GPUs of a simulated node root, Nodes on the sim API."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gpuop_common.gpu import GpuDevice, open_backends
from gpuop_sim.nodes import NodeRootInfo
from kubernetes import client


@pytest.fixture
def node_gpus(
    gpu_node_root: Callable[..., NodeRootInfo], monkeypatch: pytest.MonkeyPatch
) -> Callable[..., tuple[NodeRootInfo, list[GpuDevice]]]:
    """`node_gpus("amd-mi300x-cpx")` -> (root info, GPUs as the backends enumerate them)."""

    def make(profile: str, node_name: str = "node-1") -> tuple[NodeRootInfo, list[GpuDevice]]:
        info = gpu_node_root(profile, node_name)
        for key, value in info.env.items():
            monkeypatch.setenv(key, value)
        backends = open_backends(info.root)
        try:
            return info, [gpu for backend in backends for gpu in backend.enumerate()]
        finally:
            for backend in backends:
                backend.close()

    return make


class Nodes:
    """Node objects on the simulated API server, read and written through the real client."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)

    def create(self, name: str, labels: dict[str, str] | None = None) -> None:
        self.core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=labels or {})))

    def labels(self, name: str) -> dict[str, str]:
        return dict(self.core.read_node(name).metadata.labels or {})

    def annotations(self, name: str) -> dict[str, str]:
        return dict(self.core.read_node(name).metadata.annotations or {})

    def patch_labels(self, name: str, labels: dict[str, str | None]) -> None:
        self.core.patch_node(
            name, {"metadata": {"labels": labels}}, _content_type="application/merge-patch+json"
        )


@pytest.fixture
def nodes(kube_api_client: Any) -> Iterator[Nodes]:
    yield Nodes(kube_api_client)
