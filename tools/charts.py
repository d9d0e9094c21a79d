"""`make charts`: helm dependency build + helm lint --strict for every chart under charts/."""

from __future__ import annotations

import sys
from pathlib import Path

from gpuop_sim import helm

CHARTS_DIR = Path(__file__).resolve().parents[1] / "charts"


def main() -> int:
    charts = helm.charts_in(CHARTS_DIR)
    if not charts:
        print(f"no charts under {CHARTS_DIR} yet")
        return 0
    failed = 0
    # Umbrella charts depend on the service charts, so lint leaf charts first.
    for chart in sorted(charts, key=lambda c: "dependencies:" in (c / "Chart.yaml").read_text()):
        helm.dependency_build(chart)
        result = helm.lint(chart)
        status = "ok" if result.returncode == 0 else "FAILED"
        print(f"{status:7} {chart.relative_to(CHARTS_DIR.parent)}")
        if result.returncode != 0:
            print(result.stdout + result.stderr, file=sys.stderr)
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
