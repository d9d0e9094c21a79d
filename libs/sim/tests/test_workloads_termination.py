"""Termination-message rules as pure functions: paths, policies, caps, the log fallback."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuop_sim.workloads.simkubelet.termination import (
    DEFAULT_PATH,
    TerminationSpecError,
    log_tail,
    message_path,
    message_policy,
    read_message,
)

WHERE = "spec.containers[driver]"


def test_defaults_and_bad_fields_name_the_field() -> None:
    assert message_path({}, WHERE) == DEFAULT_PATH == "/dev/termination-log"
    assert message_policy({}, WHERE) == "File"
    with pytest.raises(TerminationSpecError, match=r"spec.containers\[driver\].terminationMessagePath"):
        message_path({"terminationMessagePath": "relative/log"}, WHERE)
    with pytest.raises(TerminationSpecError, match=r"terminationMessagePolicy: must be one of"):
        message_policy({"terminationMessagePolicy": "Logs"}, WHERE)


def test_file_is_read_up_to_4096_bytes_and_wins_over_logs(tmp_path: Path) -> None:
    file = tmp_path / "log"
    file.write_text("x" * 5000)
    assert read_message(file, "FallbackToLogsOnError", 1, "ignored") == "x" * 4096
    assert read_message(tmp_path / "missing", "File", 1, "log text") == ""


def test_fallback_only_for_an_empty_file_and_a_failure(tmp_path: Path) -> None:
    file = tmp_path / "log"
    file.write_text("")
    logs = "".join(f"line {n}\n" for n in range(100))
    assert read_message(file, "FallbackToLogsOnError", 0, logs) == ""
    tail = read_message(file, "FallbackToLogsOnError", 2, logs)
    assert tail.splitlines() == [f"line {n}" for n in range(20, 100)]
    assert len(log_tail("y" * 5000).encode()) == 2048
