"""tools/test_tmpdir.py: where `make test` puts its temp files."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
PLENTY = 64 << 30


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("test_tmpdir_tool", ROOT / "tools" / "test_tmpdir.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_statvfs(free: int) -> Any:
    return lambda _path: os.statvfs_result(
        (4096, 4096, free // 4096, free // 4096, free // 4096, 0, 0, 0, 0, 255)
    )


def test_a_tmpfs_with_room_is_chosen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tool = load()
    monkeypatch.setattr(os, "statvfs", fake_statvfs(PLENTY))
    assert tool.choose({}, (tmp_path,), PLENTY) == tmp_path


@pytest.mark.parametrize(
    ("case", "environ", "free", "memory"),
    [
        ("user set TMPDIR", {"TMPDIR": "/scratch"}, PLENTY, PLENTY),
        ("tmpfs too small (a container's 64 MiB /dev/shm)", {}, 64 << 20, PLENTY),
        ("machine short of memory", {}, PLENTY, 2 << 30),
    ],
)
def test_the_default_temp_dir_is_kept_when(
    *,
    case: str,
    environ: dict[str, str],
    free: int,
    memory: int,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tool = load()
    monkeypatch.setattr(os, "statvfs", fake_statvfs(free))
    assert tool.choose(environ, (tmp_path,), memory) is None, case


def test_a_missing_candidate_is_skipped(tmp_path: Path) -> None:
    assert load().choose({}, (tmp_path / "absent",), PLENTY) is None


def test_the_tool_prints_a_fresh_directory_it_created(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "test_tmpdir.py")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    made = Path(done.stdout.strip())
    assert made.parent == tmp_path and made.is_dir() and made.name.startswith("g-")
