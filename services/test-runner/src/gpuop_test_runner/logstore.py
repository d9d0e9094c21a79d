"""One log file per run under a host directory, with a JSON status file beside it, and retention.

`<stamp>-<run id>.log` gets the tool's output as it comes; `<stamp>-<run id>.json` says `running`
(with what the run was) when it starts and holds the RunResult when it ends. A status file still
saying `running` at start-up is a run the previous process did not finish (killed, node rebooted):
it is recorded as Aborted instead of being lost. Only the `keep` newest runs stay.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from pydantic import ValidationError

from gpuop_test_runner.results import RunResult

log = logging.getLogger(__name__)

RUNNING = "running"


@dataclass(frozen=True)
class UnfinishedRun:
    status_file: Path
    log_file: Path
    started: dict[str, Any]


class RunLogStore:
    def __init__(self, directory: Path, keep: int = 20) -> None:
        self.directory = directory
        self.keep = keep

    def _paths(self, run_id: str, start: datetime) -> tuple[Path, Path]:
        stem = f"{start.strftime('%Y%m%dT%H%M%S%fZ')}-{run_id}"
        return self.directory / f"{stem}.log", self.directory / f"{stem}.json"

    def begin(self, run_id: str, start: datetime, started: dict[str, Any]) -> tuple[TextIO, Path]:
        """Create the run's files; returns the open log (the caller closes it) and the status path."""
        self.directory.mkdir(parents=True, exist_ok=True)
        log_path, status_path = self._paths(run_id, start)
        _write_json(status_path, {"state": RUNNING, "logFile": log_path.name, **started})
        return log_path.open("a", encoding="utf-8"), status_path

    def finish(self, status_path: Path, result: RunResult) -> None:
        _write_json(status_path, {"state": "finished", "result": result.model_dump(mode="json")})
        self.prune()

    def unfinished(self) -> list[UnfinishedRun]:
        runs = []
        for status in sorted(self.directory.glob("*.json")):
            try:
                data = json.loads(status.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                log.warning("unreadable run status file", extra={"path": str(status), "error": str(exc)})
                continue
            if isinstance(data, dict) and data.get("state") == RUNNING:
                runs.append(UnfinishedRun(status, status.with_suffix(".log"), data))
        return runs

    def results(self) -> list[RunResult]:
        """Finished runs, oldest first (what is kept after retention)."""
        found = []
        for status in sorted(self.directory.glob("*.json")):
            try:
                data = json.loads(status.read_text(encoding="utf-8"))
                if data.get("state") == "finished":
                    found.append(RunResult.model_validate(data["result"]))
            except (OSError, ValueError, KeyError, ValidationError, AttributeError):
                continue
        return found

    def prune(self) -> None:
        """Delete all but the `keep` newest runs (by the timestamp their names start with)."""
        statuses = sorted(self.directory.glob("*.json"))
        for status in statuses[: max(0, len(statuses) - self.keep)]:
            for path in (status, status.with_suffix(".log")):
                try:
                    path.unlink(missing_ok=True)
                except OSError as exc:
                    log.warning("cannot delete old run file", extra={"path": str(path), "error": str(exc)})


def _write_json(path: Path, data: dict[str, Any]) -> None:
    # Write-then-rename: a crash mid-write must not leave a status file that is neither state.
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
