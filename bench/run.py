"""`make bench`: run every benchmark module and rewrite docs/benchmarks.md.

Each `bench/bench_*.py` module exposes `run() -> list[dict]`; a row has `name`, `value`, `unit` and
optionally `target` and `notes`. A module may also expose `plots(out_dir) -> list[Path]` for
benchmarks whose story is a curve. Results are measured in one run on one machine, so compare
ratios within a table rather than absolute numbers across machines.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
DOCS = BENCH_DIR.parent / "docs"

Row = dict[str, Any]


def discover(only: Sequence[str]) -> list[str]:
    names = sorted(p.stem for p in BENCH_DIR.glob("bench_*.py"))
    return [n for n in names if not only or any(o in n for o in only)]


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{cpu}, {os.cpu_count()} cores, {mem_gib:.0f} GiB RAM, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}"
    )


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def render_markdown(results: dict[str, list[Row]], failures: dict[str, str], plots: list[Path]) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (bench/run.py); do not edit by hand.",
        "",
        f"- Date: {now}",
        f"- Machine: {machine_description()}",
        "",
        "Numbers from one run on a shared, noisy machine: read ratios between rows of the same run,",
        "not absolute values across machines.",
        "",
    ]
    for module, rows in results.items():
        lines += [
            f"## {module}",
            "",
            "| benchmark | value | unit | target | notes |",
            "|---|---|---|---|---|",
        ]
        for row in rows:
            lines.append(
                f"| {row['name']} | {format_value(row['value'])} | {row.get('unit', '')} "
                f"| {row.get('target', '')} | {row.get('notes', '')} |"
            )
        lines.append("")
    for module, error in failures.items():
        lines += [f"## {module}: FAILED", "", "```", error.strip(), "```", ""]
    if plots:
        lines += ["## Plots", ""]
        lines += [f"![{p.stem}]({p.relative_to(DOCS).as_posix()})" for p in plots]
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("only", nargs="*", help="run only modules whose name contains one of these")
    parser.add_argument("--output", type=Path, default=DOCS / "benchmarks.md")
    args = parser.parse_args(argv)
    results: dict[str, list[Row]] = {}
    failures: dict[str, str] = {}
    plots: list[Path] = []
    for name in discover(args.only):
        started = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            module = importlib.import_module(f"bench.{name}")
            rows: list[Row] = module.run()
            if hasattr(module, "plots"):
                plots += module.plots(DOCS / "img")
        except Exception:  # a broken benchmark is reported in the doc, the others still run
            failures[name] = traceback.format_exc()
            print(failures[name], file=sys.stderr)
            continue
        results[name] = rows
        for row in rows:
            print(f"  {row['name']:<60} {format_value(row['value']):>12} {row.get('unit', '')}")
        print(f"  ({time.perf_counter() - started:.1f} s)")
    args.output.write_text(render_markdown(results, failures, plots))
    print(f"wrote {args.output}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
