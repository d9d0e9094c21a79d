"""`python -m gpuop_sim.nodes PROFILE DEST [--node-name NAME]`: lay a node root, print its info as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from gpuop_sim.nodes.profiles import PROFILES, build_node_root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m gpuop_sim.nodes", description=__doc__)
    parser.add_argument("profile", choices=sorted(PROFILES))
    parser.add_argument("dest", type=Path)
    parser.add_argument("--node-name", default=None)
    args = parser.parse_args(argv)
    try:
        info = build_node_root(args.profile, args.dest, node_name=args.node_name)
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        json.dumps(
            {
                "profile": info.profile,
                "root": str(info.root),
                "vendor": info.vendor.value if info.vendor else None,
                "gpu_count": info.gpu_count,
                "partition_count": info.partition_count,
                "pci_addresses": list(info.pci_addresses),
                "env": info.env,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
