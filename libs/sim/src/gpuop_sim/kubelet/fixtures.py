"""Pytest fixtures for this area; re-exported by gpuop_sim.pytest_plugin.

`short_tmp_dir`: a fresh directory under a short base (gpuop_sim.shortpaths), short enough for unix
sockets (pytest's tmp_path can exceed the 107-byte limit once the kubelet's nested paths are appended).
`kubelet_emulator`: a started KubeletEmulator rooted in such a directory, stopped after the test.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..shortpaths import short_tmp_dir as _make_short_dir
from .emulator import KubeletEmulator

__all__ = ["kubelet_emulator", "short_tmp_dir"]


@pytest.fixture
def short_tmp_dir() -> Iterator[Path]:
    path = _make_short_dir("gk-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet_emulator(short_tmp_dir: Path) -> Iterator[KubeletEmulator]:
    emulator = KubeletEmulator(short_tmp_dir, endpoint_grace_s=30.0).start()
    try:
        yield emulator
    finally:
        emulator.stop()
