"""Debian tools the real-tool tests need, installed through apt when missing and the test runs as root.

CI's machine is a fresh Debian: the project's own files install what its tests run (here, on first
use), so nothing has to be set up by hand. Without root or apt a caller skips, naming what is missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping


def missing_tools(tools: Mapping[str, str]) -> list[str]:
    """The executables of `tools` (executable -> Debian package) that are not on PATH."""
    return [tool for tool in tools if shutil.which(tool) is None]


def ensure_tools(tools: Mapping[str, str]) -> list[str]:
    """Install the packages of missing executables (root with apt only); returns what is still missing."""
    missing = missing_tools(tools)
    if missing and os.geteuid() == 0 and shutil.which("apt-get"):
        packages = sorted({tools[tool] for tool in missing})
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
        # A fresh machine's package lists may be empty or stale: update once, only when needed.
        if subprocess.run(install, env=env, capture_output=True, check=False).returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, capture_output=True, check=False)
            subprocess.run(install, env=env, capture_output=True, check=False)
    return missing_tools(tools)
