"""The simulator's state base: TMPDIR when short (a tmpfs under `make test`), else /tmp."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from gpuop_sim import shortpaths


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
