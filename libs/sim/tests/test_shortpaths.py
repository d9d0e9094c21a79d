"""The simulator's state base: TMPDIR when short (a tmpfs under `make test`), else /tmp."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from gpuop_sim import shortpaths
from gpuop_sim.cluster import SimCluster
from gpuop_sim.shortpaths import short_tmp_dir


def test_a_short_tmpdir_is_the_base_and_a_long_one_falls_back_to_tmp(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    short = Path(tempfile.mkdtemp(prefix="s-", dir="/tmp"))
    long = tmp_path / ("x" * 60)
    long.mkdir()
    try:
        monkeypatch.setattr(tempfile, "tempdir", str(short))
        assert shortpaths.short_tmp_base() == str(short)
        made = shortpaths.short_tmp_dir("gs-")
        assert made.parent == short and made.name.startswith("gs-") and made.is_dir()
        monkeypatch.setattr(tempfile, "tempdir", str(long))
        assert shortpaths.short_tmp_base() == "/tmp"
    finally:
        for path in short.iterdir():
            path.rmdir()
        short.rmdir()


@pytest.mark.skipif(os.geteuid() != 0, reason="containers drop to their image's user only when run as root")
@pytest.mark.parametrize("closed", ["state", "python"])
def test_a_process_cluster_refuses_what_its_containers_could_not_reach(
    closed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout under root's 0700 home (or pytest's 0700 tmp_path): the operator image's uid 65532
    could not read the environment its program runs from, so every pod would crash; say so first."""
    shut = tmp_path / "private"
    shut.mkdir(mode=0o700)
    base = short_tmp_dir("reach-")
    try:
        if closed == "state":
            cluster = SimCluster(state_dir=shut / "state", amd_nodes=1, pods="process")
        else:
            monkeypatch.setattr(sys, "prefix", str(shut / "venv"))
            (shut / "venv").mkdir()
            cluster = SimCluster(state_dir=base / "state", amd_nodes=1, pods="process")
        with pytest.raises(ValueError, match="closed to other users") as refused:
            cluster.start()
        named = str(refused.value).split(" (under ")[0]
        assert str(shut).startswith(named), refused.value  # the first closed folder on the way
        what = "node roots and volumes" if closed == "state" else "Python environment"
        assert what in str(refused.value)
    finally:
        shutil.rmtree(base, ignore_errors=True)
