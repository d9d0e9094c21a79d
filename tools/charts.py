"""Chart tooling behind `make charts` and `make package`.

    python tools/charts.py            check versions, then helm dependency build + lint --strict
    python tools/charts.py versions   write VERSION into every Chart.yaml and service pyproject.toml
    python tools/charts.py package    check, then dist/<chart>-<version>.tgz for every chart

Every step runs the plain helm commands a user runs from a fresh clone (gpuop_sim.helm).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from gpuop_sim import chartversions, helm

ROOT = Path(__file__).resolve().parents[1]
CHARTS_DIR = ROOT / "charts"


def _check_versions() -> bool:
    stale = chartversions.stale_fields(ROOT)
    for line in stale:
        print(f"stale   {line}", file=sys.stderr)
    if stale:
        print(
            "run `python tools/charts.py versions` (then `uv lock` if a pyproject changed)", file=sys.stderr
        )
    return not stale


def lint_all() -> int:
    if not _check_versions():
        return 1
    failed = 0
    for chart in helm.charts_in(CHARTS_DIR):
        try:
            helm.dependency_build(chart)
        except helm.ChartError as error:
            print(f"FAILED  {chart.relative_to(ROOT)}\n{error}", file=sys.stderr)
            failed += 1
            continue
        result = helm.lint(chart)
        status = "ok" if result.returncode == 0 else "FAILED"
        print(f"{status:7} {chart.relative_to(ROOT)}")
        if result.returncode != 0:
            print(result.stdout + result.stderr, file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def package_all(destination: Path) -> int:
    if not _check_versions():
        return 1
    for chart in helm.charts_in(CHARTS_DIR):
        try:
            archive = helm.package(chart, destination)
        except helm.ChartError as error:
            print(f"FAILED  {chart.relative_to(ROOT)}\n{error}", file=sys.stderr)
            return 1
        print(f"ok      {archive.relative_to(ROOT) if archive.is_relative_to(ROOT) else archive}")
    return 0


def write_versions() -> int:
    version = chartversions.read_version(ROOT)
    changed = chartversions.write_versions(ROOT)
    for path in changed:
        print(f"wrote   {path.relative_to(ROOT)} ({version})")
    if any(path.name == "pyproject.toml" for path in changed):
        print("a service version changed: run `uv lock` so `make install` stays --locked")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", nargs="?", choices=["lint", "versions", "package"], default="lint")
    parser.add_argument("--dest", type=Path, default=ROOT / "dist", help="package: where the .tgz go")
    args = parser.parse_args(argv)
    try:
        if args.command == "versions":
            return write_versions()
        if args.command == "package":
            return package_all(args.dest.resolve())
        return lint_all()
    except helm.ChartError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
