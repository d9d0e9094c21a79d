"""Locate the real `kubectl` and `helm` binaries that `make install` extracts into bin/.

Tests, the demo and benchmarks drive the real binaries against the simulator. They live in the
git-ignored bin/ dir at the repo root (or wherever GPUOP_BIN_DIR points); a missing binary is a
clear error telling the reader to run `make install`, never a silent skip.
"""

from __future__ import annotations

import os
from pathlib import Path


class MissingBinaryError(RuntimeError):
    """A tool that `make install` provides is not on disk."""


def repo_root() -> Path:
    """The workspace root: the first parent holding both `libs/` and `pyproject.toml`."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "libs").is_dir() and (parent / "pyproject.toml").is_file():
            return parent
    return Path.cwd()


def find_binary(name: str) -> Path:
    """Path of `kubectl` or `helm` from GPUOP_BIN_DIR, else `<repo>/bin`."""
    bin_dir = Path(os.environ.get("GPUOP_BIN_DIR") or repo_root() / "bin")
    candidate = bin_dir / name
    if not (candidate.is_file() and os.access(candidate, os.X_OK)):
        raise MissingBinaryError(f"{candidate} not found: run `make install` to extract {name}")
    return candidate
