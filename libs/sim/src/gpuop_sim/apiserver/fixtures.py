"""Pytest fixtures for this area; re-exported by gpuop_sim.pytest_plugin.

- `sim_apiserver`: a fresh SimApiServer (controllers on) per test, stopped afterwards.
- `sim_kubeconfig`: path of a kubeconfig pointing at it (for kubectl or load_kube_config).
- `kube_api_client`: a `kubernetes.client.ApiClient` configured from that kubeconfig.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpuop_sim.apiserver.server import SimApiServer

__all__ = ["kube_api_client", "sim_apiserver", "sim_kubeconfig"]


@pytest.fixture
def sim_apiserver() -> Iterator[SimApiServer]:
    server = SimApiServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def sim_kubeconfig(sim_apiserver: SimApiServer, tmp_path: Path) -> Path:
    return sim_apiserver.write_kubeconfig(tmp_path / "kubeconfig")


@pytest.fixture
def kube_api_client(sim_kubeconfig: Path) -> Iterator[Any]:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(config_file=str(sim_kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    api = client.ApiClient(configuration)
    try:
        yield api
    finally:
        api.close()  # type: ignore[no-untyped-call]
