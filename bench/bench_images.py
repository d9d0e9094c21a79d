"""Service image sizes and container start, read from the images `make images` left in storage.

Size: the image's uncompressed size as podman reports it (every layer, base included), what a node
stores; the compressed size a node pulls is the sum of the gzip'd layers, smaller. Start: one
`podman run --rm <image> --help` with runc, median of a few: a container's create, start and
teardown plus the interpreter importing the service's entrypoint (the kubernetes client included),
read-only root as the charts run them. With vfs storage (as `make images` uses) podman copies the
image's whole root for each container, which dominates that time here; overlay storage on a node
does not. Needs root and the images (`make images`); builds nothing.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
VERSION = (REPO / "VERSION").read_text().strip()
PODMAN = ("podman", "--storage-driver", "vfs", "--runtime", "runc", "--cgroup-manager", "cgroupfs")
AGENTS = ("device-plugin", "dra-driver", "metrics-exporter", "node-labeller")
STARTS = 3


def _services() -> list[str]:
    return sorted(p.parent.name for p in (REPO / "services").glob("*/Dockerfile"))


def _inspect(reference: str) -> dict[str, Any]:
    done = subprocess.run(
        [*PODMAN, "image", "inspect", reference], check=False, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"{reference} is not in local container storage: run `make images`")
    (info,) = json.loads(done.stdout)
    return dict(info)


def _start_seconds(reference: str) -> float:
    command = [*PODMAN, "run", "--rm", "--network", "none", "--read-only", "--read-only-tmpfs=false"]
    command += ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024", reference, "--help"]
    times = []
    for _ in range(STARTS):
        started = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for service in _services():
        reference = f"localhost/gpuop/gpuop-{service}:{VERSION}"
        info = _inspect(reference)
        target = "< 200" if service in AGENTS else ""
        user = info["Config"].get("User") or "root"
        rows.append(
            {"name": f"{service} image size", "value": info["Size"] / 1e6, "unit": "MB", "target": target,
             "notes": f"USER {user}"}
        )  # fmt: skip
        rows.append(
            {"name": f"{service} --help in a container", "value": _start_seconds(reference), "unit": "s"}
        )
    return rows
