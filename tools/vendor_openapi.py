"""Pack the recorded kube-apiserver OpenAPI documents the simulated API server serves into gpuop_sim.

The simulated API server serves the real kube-apiserver 1.36's own OpenAPI documents (recorded in
`shared/fixtures/kube-apiserver-1.36/openapi/`). The simulator must work from a user's clone and
from an installed wheel, where no `shared/` exists, so the documents it serves ship inside the
package as one xz-compressed tar (about 0.2 MB for 7 MB of JSON): `/openapi/v2`, the CRD example
that CRD documents are built from, and `/openapi/v3/<gv>` for each group-version it serves.
Recorded documents of group-versions the simulator does not serve are left out.

    python tools/vendor_openapi.py          # rewrite the package's archive from shared/
    python tools/vendor_openapi.py --check  # exit 1 when the archive differs from shared/
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
from pathlib import Path

from gpuop_sim.apiserver import openapi
from gpuop_sim.apiserver.resources import ResourceRegistry
from shared_fixtures import shared_dir

RECORDED = shared_dir() / "fixtures" / "kube-apiserver-1.36" / "openapi"


def served_members(recorded: Path) -> dict[str, bytes]:
    """Archive member name -> bytes: what the simulated API server can serve, nothing else."""
    registry = ResourceRegistry()
    served = {
        openapi.gv_path(group, version) for group, versions in registry.groups() for version in versions
    }
    served.add("api/v1")
    members = {"v2.json": (recorded / "v2.json").read_bytes()}
    for path in sorted((recorded / "v3").glob("*.json")):
        if path.name == openapi.EXAMPLE_FILE or "/".join(path.stem.split("_")) in served:
            members[f"v3/{path.name}"] = path.read_bytes()
    return members


def pack(members: dict[str, bytes]) -> bytes:
    """A reproducible tar.xz: fixed owner, mode and time, sorted names."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:xz", preset=9) as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(members[name]), 0o644, 0
            tar.addfile(info, io.BytesIO(members[name]))
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 when stale")
    args = parser.parse_args(argv)
    wanted = served_members(RECORDED)
    target = openapi.archive_path()
    if args.check:
        try:
            packed = openapi.read_archive(target.read_bytes())
        except (OSError, openapi.OpenApiUnavailableError) as error:
            print(f"{target}: {error}", file=sys.stderr)
            return 1
        if packed != wanted:
            stale = sorted(set(packed) ^ set(wanted) | {n for n in packed if packed[n] != wanted.get(n)})
            names = ", ".join(stale)
            print(f"{target} is stale ({names}): run python tools/vendor_openapi.py", file=sys.stderr)
            return 1
        return 0
    target.write_bytes(pack(wanted))
    print(f"wrote {target} ({target.stat().st_size} bytes, {len(wanted)} documents)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
