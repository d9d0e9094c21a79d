"""`make bench` writes a results page with the machine and date (bench/run.py)."""

from __future__ import annotations

from bench import run


def test_markdown_has_date_machine_rows_and_failures() -> None:
    rows = [{"name": "get node", "value": 1234.5, "unit": "req/s", "target": ">= 1000"}]
    page = run.render_markdown({"bench_x": rows}, {"bench_y": "Traceback: boom"}, [])
    assert "- Date: " in page
    assert "cores" in page
    assert "| get node | 1,234 | req/s | >= 1000 |" in page
    assert "## bench_y: FAILED" in page


def test_discover_filters_by_substring() -> None:
    names = run.discover([])
    assert all(n.startswith("bench_") for n in names)
    assert run.discover(["no-such-benchmark"]) == []
