"""The one way agents write a sysfs attribute (AMD partition files), and how a stand-in driver hooks it.

On a node the kernel runs the attribute's store callback inside `write(2)`, so a refused value comes
back as an errno from that call (EINVAL for a mode the GPU does not allow, EBUSY while the GPU is in
use). A plain file cannot do that, so the simulator's driver takes the same call: the environment
variable GPUOP_SYSFS_WRITER names a `module:function` with the signature of `write_attr` (like
GPUOP_NVML_MODULE for NVML). Unset, which is every real node, the attribute file is written.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from pathlib import Path

WRITER_ENV = "GPUOP_SYSFS_WRITER"

AttrWriter = Callable[[Path, str], None]


def write_attr(path: Path, value: str) -> None:
    """Write `value` + newline in one `write(2)` (what `echo value > attr` does); OSError carries errno.

    The file is never created or truncated: a sysfs attribute exists or it does not (ENOENT).
    """
    fd = os.open(path, os.O_WRONLY)
    try:
        data = (value + "\n").encode()
        written = os.write(fd, data)
        if written != len(data):
            raise OSError(f"short write to {path}: {written} of {len(data)} bytes")
    finally:
        os.close(fd)


def writer_from_env() -> AttrWriter:
    """`write_attr`, or the function GPUOP_SYSFS_WRITER names (`package.module:function`)."""
    spec = os.environ.get(WRITER_ENV, "").strip()
    if not spec:
        return write_attr
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"{WRITER_ENV}={spec!r}: expected 'package.module:function'")
    function = getattr(importlib.import_module(module_name), attr, None)
    if not callable(function):
        raise ValueError(f"{WRITER_ENV}={spec!r}: {module_name} has no function {attr!r}")
    writer: AttrWriter = function
    return writer
