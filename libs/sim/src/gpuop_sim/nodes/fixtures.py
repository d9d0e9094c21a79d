"""Pytest fixtures for this area; re-exported by gpuop_sim.pytest_plugin.

`gpu_node_root("amd-mi300x-cpx")` lays a fresh simulated node root in the test's temp dir and
returns its NodeRootInfo; call it several times for several nodes.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpuop_sim.nodes.profiles import NodeRootInfo, build_node_root

__all__ = ["gpu_node_root"]


@pytest.fixture
def gpu_node_root(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., NodeRootInfo]:
    def make(profile: str, node_name: str | None = None) -> NodeRootInfo:
        dest: Path = tmp_path_factory.mktemp(f"node-{profile}")
        return build_node_root(profile, dest / "root", node_name=node_name)

    return make
