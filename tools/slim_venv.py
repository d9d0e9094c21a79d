"""Trim an image's virtual environment in the Dockerfiles' build stage: `python slim_venv.py /app`.

Measured on the device-plugin image (docs/images.md, "What the bytes are"): the `kubernetes`
client is 126 MB of its 190 MB venv, and the wheels' C extensions carry ~11 MB of debug symbols.
Three cuts, all checked by `make test-images` (every image's entrypoint runs inside it):
- debug symbols: `strip --strip-unneeded` on every shared object (pyyaml's 2.7 MB `_yaml` becomes
  0.4 MB, aiohttp's parser 3.3 -> 0.6 MB); nothing at run time reads them.
- `kubernetes/aio` (68 MB): the asyncio copy of the generated client that kubernetes 37 ships
  beside the sync one. gpuop imports only the sync client; nothing in the package imports `aio`.
- the rest of `kubernetes` becomes sourceless bytecode (59 MB -> 25 MB): its generated models are
  34 MB of source with docstrings. Keeping bytecode, not source, matters because the charts run
  every agent with a read-only root: without `.pyc` files each start would compile all ~700 model
  modules again (docs/images.md has the seconds). A traceback through the client still names file
  and line, without the source line.
Our own packages and every other dependency keep their source.
"""

from __future__ import annotations

import compileall
import shutil
import subprocess
import sys
from pathlib import Path


def site_packages(venv: Path) -> Path:
    (found,) = venv.glob("lib/python3.*/site-packages")
    return found


def slim(venv: Path) -> int:
    """Bytes removed from `venv`."""
    before = _size(venv)
    shared_objects = sorted(
        str(path) for path in venv.rglob("*.so*") if path.is_file() and not path.is_symlink()
    )
    if shared_objects:
        subprocess.run(["strip", "--strip-unneeded", *shared_objects], check=True)
    kubernetes = site_packages(venv) / "kubernetes"
    if not kubernetes.is_dir():
        return before - _size(venv)
    shutil.rmtree(kubernetes / "aio", ignore_errors=True)
    for cache in list(kubernetes.rglob("__pycache__")):
        shutil.rmtree(cache)
    # legacy=True writes foo.pyc beside foo.py, which Python loads once foo.py is gone.
    if not compileall.compile_dir(kubernetes, quiet=1, legacy=True, workers=0):
        raise SystemExit(f"slim_venv: compiling {kubernetes} failed")
    for source in kubernetes.rglob("*.py"):
        source.unlink()
    return before - _size(venv)


def _size(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file() and not path.is_symlink())


if __name__ == "__main__":
    removed = slim(Path(sys.argv[1]))
    print(f"slim_venv: {removed / 1e6:.0f} MB removed from {sys.argv[1]}")
