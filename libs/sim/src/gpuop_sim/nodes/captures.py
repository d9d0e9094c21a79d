"""The real KFD topology captures, packed into the package so simulated nodes work on any machine.

`kfd_captures.json.gz` holds every file of `shared/fixtures/amd-kfd-topology/` (ROCm k8s-device-plugin
test data, Apache-2.0, see `kfd_captures.NOTICE.md`) as relative path -> text. Regenerate with
`python -m gpuop_sim.nodes.captures <fixtures/amd-kfd-topology> [out]`.
"""

from __future__ import annotations

import functools
import gzip
import json
import sys
from pathlib import Path

from gpuop_common.gpu.amd_topology import KFD_TOPOLOGY

CAPTURES_FILE = Path(__file__).with_name("kfd_captures.json.gz")
CAPTURE_NAMES = ("mi210-8gpu-xgmi-pcie", "mi300x-8gpu-cpx", "single-gpu-plus-copy")


@functools.cache
def load_captures() -> dict[str, str]:
    data = json.loads(gzip.decompress(CAPTURES_FILE.read_bytes()))
    if not isinstance(data, dict):
        raise ValueError(f"{CAPTURES_FILE}: expected a JSON object")
    return {str(k): str(v) for k, v in data.items()}


def capture_files(capture: str) -> dict[str, str]:
    """Files of one capture relative to its `topology/` dir (`nodes/2/properties` ...)."""
    if capture not in CAPTURE_NAMES:
        raise KeyError(f"unknown KFD capture {capture!r} (known: {', '.join(CAPTURE_NAMES)})")
    prefix = f"{capture}/"
    result: dict[str, str] = {}
    for rel, text in load_captures().items():
        if not rel.startswith(prefix):
            continue
        inner = rel[len(prefix) :]
        inner = inner.removeprefix("topology/")
        if inner.startswith("nodes/") or inner in ("generation_id", "system_properties"):
            result[inner] = text
    return result


def extract(capture: str, dest_root: Path) -> Path:
    """Write one capture as `<dest_root>/sys/class/kfd/kfd/topology`; returns that dir."""
    target = dest_root / KFD_TOPOLOGY
    for rel, text in capture_files(capture).items():
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return target


def pack(source: Path, out: Path = CAPTURES_FILE) -> int:
    files = {
        str(path.relative_to(source)): path.read_text()
        for path in sorted(source.rglob("*"))
        if path.is_file() and path.relative_to(source).parts[0] in CAPTURE_NAMES
    }
    blob = gzip.compress(json.dumps(files, sort_keys=True).encode(), 9, mtime=0)
    out.write_bytes(blob)
    return len(files)


if __name__ == "__main__":
    count = pack(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else CAPTURES_FILE)
    print(f"packed {count} files")
