"""`make bench` writes a results page with the machine and date (bench/run.py)."""

from __future__ import annotations

from pathlib import Path

from gpuop_sim.nodes import build_node_root

from bench import bench_test_runner, run


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


def test_test_runner_benchmark_measures_a_passing_self_check(tmp_path: Path) -> None:
    # The timed run must be the real thing: a self-check that passes on every GPU of the capture.
    info = build_node_root("amd-mi300x-cpx", tmp_path / "amd")
    milliseconds, outcome = bench_test_runner.selfcheck_ms(info.root, tmp_path / "logs", runs=1)
    assert outcome == "Passed on 8 GPUs"
    assert milliseconds > 0
    rss, anon = bench_test_runner.import_floor_mib(info.env)
    assert 0 < anon < rss
