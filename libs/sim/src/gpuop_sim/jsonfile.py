"""One way to replace a simulated node's JSON state file atomically, readable by every user.

A reader in another process (a container) sees the old or the new file, never half of one. mkstemp
makes the file 0600; the state stands for what a driver exposes to every user of the node (NVML
through world-accessible /dev/nvidia*, sysfs), and containers run as non-root users, so it is 0644.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def write_json_atomic(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
