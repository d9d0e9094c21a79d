"""A vendor tools image for simulated nodes: `rvs` (AMD's test runner image) and `dcgmi` (NVIDIA's
DCGM image), printing what the vendors document their tools print, about the node's own GPUs.

A cluster maps a tools image to it through `image_commands`, one entry per vendor:

    {"docker.io/rocm/test-runner": [python, "-m", "gpuop_sim.toolsimage", "amd"],
     "nvcr.io/nvidia/cloud-native/dcgm": [python, "-m", "gpuop_sim.toolsimage", "nvidia"]}

The simulated kubelet drops the container's `command[0]` for an override (podspec.resolve_argv), so
the AMD image tells RVS from AGFHC by its arguments: `-c <conf>` is RVS; anything else (AGFHC's
`-r <recipe>`) is not in the image, as in AMD's public test runner image, and the container fails
to run as a shell fails a missing command (exit 127, the message on stderr).

RVS output: the GST lines of the RVS user guide (`[RESULT] [<ts>] <action> gst <kfd gpu_id> ...
pass: TRUE|FALSE`), one per GPU KFD node under the node's sysfs (`$GPUOP_HOST_ROOT`). `dcgmi diag
-j`: the JSON of the DCGM user guide (test_categories -> tests -> results per GPU entity) for the
indices `-i` names. A GPU listed in `<root>/var/lib/gpuop-sim/tools-fail` (KFD gpu_id or NVML
index, one a line) fails. services/test-runner/tests/fixtures/documented/README.md says where the
formats come from.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

FAIL_FILE = "var/lib/gpuop-sim/tools-fail"
ROOT_ENV = "GPUOP_HOST_ROOT"


def _root() -> Path:
    return Path(os.environ.get(ROOT_ENV, "/"))


def failing(root: Path) -> set[str]:
    path = root / FAIL_FILE
    return set(path.read_text().split()) if path.is_file() else set()


def kfd_gpu_ids(root: Path) -> list[int]:
    """The node's GPU KFD gpu_ids (CPU nodes say 0), in node order."""
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    ids = []
    for node in sorted(nodes.iterdir(), key=lambda p: int(p.name)) if nodes.is_dir() else []:
        text = (node / "gpu_id").read_text().strip() if (node / "gpu_id").is_file() else "0"
        # Every KFD node of a partitioned GPU (and a duplicate node) names one gpu_id once.
        if text.isdigit() and int(text) and int(text) not in ids:
            ids.append(int(text))
    return ids


def rvs_lines(gpu_ids: Sequence[int], fails: set[str], action: str = "action_gst_1") -> list[str]:
    stamp = time.monotonic()
    lines = []
    for gpu in gpu_ids:
        verdict = "FALSE" if str(gpu) in fails else "TRUE"
        lines.append(f"[INFO  ] [{stamp:.6f}] {action} gst {gpu} start 3500.000000 copy matrix:true")
        lines.append(
            f"[RESULT] [{stamp:.6f}] {action} gst {gpu} Gflop: 4066.020766 flops_per_op: 382.205952x1e9 "
            f"bytes_copied_per_op: 398131200 try_ops_per_sec: 9.157367 pass: {verdict}"
        )
    return lines


def dcgm_document(indices: Sequence[int], fails: set[str], level: str) -> dict[str, object]:
    def results(failing_ok: bool) -> list[dict[str, object]]:
        return [
            {
                "entity_group": "GPU",
                "entity_group_id": 1,
                "entity_id": i,
                "status": "Fail" if failing_ok and str(i) in fails else "Pass",
            }
            for i in indices
        ]

    return {
        "DCGM Diagnostic": {
            "version": "4.2.3",
            "runtime_error": "",
            "test_categories": [
                {"category": "Deployment", "tests": [{"name": "software", "results": results(False)}]},
                {"category": f"Level {level}", "tests": [{"name": "memtest", "results": results(True)}]},
            ],
        }
    }


def _amd(args: list[str]) -> int:
    if args[:1] != ["-c"] or len(args) < 2:
        print(f'exec: "{args[0] if args else ""}": executable file not found in $PATH', file=sys.stderr)
        return 127
    root = _root()
    fails = failing(root)
    print("\n".join(rvs_lines(kfd_gpu_ids(root), fails)))
    return 0


def _nvidia(args: list[str]) -> int:
    if args[:1] != ["diag"]:
        print("Usage: dcgmi diag -r <level> -j -i <gpu indices>", file=sys.stderr)
        return 2
    level = args[args.index("-r") + 1] if "-r" in args else "1"
    indices = [int(i) for i in args[args.index("-i") + 1].split(",")] if "-i" in args else [0]
    fails = failing(_root())
    print(json.dumps(dcgm_document(indices, fails, level), indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    vendor, rest = (args[0], args[1:]) if args else ("", [])
    if vendor == "amd":
        return _amd(rest)
    if vendor == "nvidia":
        return _nvidia(rest)
    print(f"gpuop_sim.toolsimage: vendor must be amd or nvidia, not {vendor!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
