"""Where the simulator makes its state directories: short enough for unix-socket paths.

A socket path has a 107-byte limit and the kubelet's nested paths are long, so state lives in a
short base directory: `TMPDIR` when it is short (`make test` points it at a tmpfs when one has room:
the simulated GPU trees are tens of thousands of small files), otherwise /tmp.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

# `/tmp/gpuop-sim-xxxxxxxx/nodes/nvidia-0/var/lib/kubelet/device-plugins/kubelet.sock` is 81 bytes
# under /tmp: a base of up to 20 characters keeps the deepest socket under 100.
MAX_BASE_LENGTH = 20


def short_tmp_base() -> str:
    base = tempfile.gettempdir()
    return base if len(base) <= MAX_BASE_LENGTH else "/tmp"


def short_tmp_dir(prefix: str) -> Path:
    """A fresh directory under the short base; the caller removes it.

    0755, not mkdtemp's 0700: process-mode containers run as their image's user (often not root)
    and must reach their node root, volumes and the kubeconfig below it, as on a node."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=short_tmp_base()))
    path.chmod(0o755)
    return path


def untraversable_parent(path: Path) -> Path | None:
    """The first directory from `/` down to `path` that other users cannot enter; None if none."""
    for directory in (*reversed(path.resolve().parents), path.resolve()):
        if directory.is_dir() and not directory.stat().st_mode & 0o001:
            return directory
    return None
