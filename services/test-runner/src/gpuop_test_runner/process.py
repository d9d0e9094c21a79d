"""Running a test tool: found on PATH (plus the vendors' install dirs), in its own process group.

Test tools fork workers per GPU; killing only the direct child would leave them running on the GPU.
So every tool starts a new session (its own process group) and timeouts and shutdown signal the
whole group: SIGTERM first, SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

KILL_GRACE_S = 5.0
MAX_KEPT_OUTPUT = 4 * 1024 * 1024  # parsed output kept in memory; the log file gets everything
_POLL_S = 0.1


class ToolMissingError(RuntimeError):
    def __init__(self, executable: str, search_path: str, hint: str = "") -> None:
        super().__init__(
            f"executable {executable!r} not found (searched {search_path})" + (f"; {hint}" if hint else "")
        )
        self.executable = executable


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    exit_code: int | None  # None: killed by us (timeout or stop)
    output: str
    timed_out: bool = False
    aborted: bool = False


def search_path(extra_dirs: str) -> str:
    """PATH, then the extra dirs (`/opt/rocm/bin:...`) where vendor packages install their tools."""
    parts = [p for p in (os.environ.get("PATH", ""), extra_dirs) if p]
    return os.pathsep.join(parts)


def resolve(executable: str, path: str, hint: str = "") -> str:
    found = shutil.which(executable, path=path)
    if found is None:
        raise ToolMissingError(executable, path, hint)
    return found


def _kill_group(proc: subprocess.Popen[str]) -> None:
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, KILL_GRACE_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _pump(stream: TextIO, log: TextIO, kept: list[str]) -> None:
    size = 0
    for line in stream:
        log.write(line)
        log.flush()
        if size < MAX_KEPT_OUTPUT:
            kept.append(line)
            size += len(line)


def run_tool(
    argv: Sequence[str],
    *,
    timeout: float,
    log: TextIO,
    should_stop: Callable[[], bool],
    path: str,
    hint: str = "",
) -> ToolOutcome:
    """Run argv to completion, timeout or stop; stdout and stderr go to `log` as they come.
    `hint` ends a ToolMissing message: which setting provides the tool."""
    executable = resolve(argv[0], path, hint)
    proc = subprocess.Popen(
        [executable, *argv[1:]],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
        start_new_session=True,
        env={**os.environ, "PATH": path},
    )
    kept: list[str] = []
    assert proc.stdout is not None
    reader = threading.Thread(
        target=_pump, args=(proc.stdout, log, kept), name="gpuop-tool-output", daemon=True
    )
    reader.start()
    deadline = time.monotonic() + timeout
    timed_out = aborted = False
    while proc.poll() is None:
        if should_stop():
            aborted = True
        elif time.monotonic() >= deadline:
            timed_out = True
        if aborted or timed_out:
            _kill_group(proc)
            break
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(_POLL_S)
    # Workers the tool left behind still hold the GPU (and the pipe): they go with the group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    reader.join(KILL_GRACE_S)
    code = None if (timed_out or aborted) else proc.returncode
    return ToolOutcome(exit_code=code, output="".join(kept), timed_out=timed_out, aborted=aborted)


@dataclass(frozen=True)
class LocalTools:
    """Tools on this host: PATH plus the vendors' install dirs (standalone use, or a node with the
    tools installed and `testRunner.toolsImage.<vendor>` empty). `hint` says which setting would
    provide a missing tool instead."""

    path: str
    hint: str = ""

    def describe(self) -> str:
        return "on this host"

    def run(
        self, argv: Sequence[str], *, timeout: float, log: TextIO, should_stop: Callable[[], bool]
    ) -> ToolOutcome:
        return run_tool(
            argv, timeout=timeout, log=log, should_stop=should_stop, path=self.path, hint=self.hint
        )


class ToolRunner(Protocol):
    """Where a recipe's commands run: `LocalTools` or `toolpod.PodTools`."""

    def describe(self) -> str: ...

    def run(
        self, argv: Sequence[str], *, timeout: float, log: TextIO, should_stop: Callable[[], bool]
    ) -> ToolOutcome: ...
