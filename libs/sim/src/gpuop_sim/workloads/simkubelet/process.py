"""One container as a local process group, with its output appended to a per-container log file."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path


class ContainerProcess:
    """Start, poll and stop one container process; its whole process group goes with it."""

    def __init__(self, argv: list[str], env: Mapping[str, str], cwd: Path, log_path: Path) -> None:
        self.argv = argv
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self._popen: subprocess.Popen[bytes] | None = None
        self.started_at = 0.0

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.cwd.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # Own session: SIGTERM reaches the container's children too, not our terminal's group.
                start_new_session=True,
            )
        self.started_at = time.monotonic()

    def exit_code(self) -> int | None:
        """None while running."""
        return None if self._popen is None else self._popen.poll()

    def stop(self, grace_seconds: float) -> int | None:
        """SIGTERM, then SIGKILL once `grace_seconds` pass; returns the exit code."""
        if self._popen is None:
            return None
        if self._popen.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self._popen.wait(timeout=max(grace_seconds, 0.0))
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self._popen.wait(timeout=5)
        # Reap any grandchildren the container left in its group.
        self._signal(signal.SIGKILL)
        return self._popen.returncode

    def _signal(self, sig: signal.Signals) -> None:
        if self._popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, sig)
