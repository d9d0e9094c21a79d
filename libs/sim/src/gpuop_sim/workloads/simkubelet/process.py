"""One container as a local process group, its stdout/stderr written to a CRI-format log file.

Like a container runtime, the output goes through pipes: a reader thread per stream stamps each line
with the time it arrived and appends it as a CRI record (`gpuop_sim.crilog`), so `kubectl logs
--timestamps`, `--since` and `--tail` see per-line times.

Like a runtime, it starts the process as the container's `RunIdentity` (uid, groups, capability
bounding set, no_new_privs) through util-linux `setpriv`, so the kernel enforces it. That needs root;
a simulator run by another user starts containers as itself (and they can do only what it can).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from gpuop_sim.crilog import MAX_RECORD_BYTES, format_record
from gpuop_sim.workloads.simkubelet.identity import RunIdentity

SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"


def can_change_identity() -> bool:
    return os.geteuid() == 0


def run_as_argv(identity: RunIdentity, argv: list[str]) -> list[str]:
    """`argv` started by setpriv as `identity`: ids and groups, then the capability sets.

    The inheritable set is cleared (containerd sets none), which clears the ambient set too. A
    bounding set is given only when narrower than everything (privileged keeps the node's own)."""
    groups = (
        ["--clear-groups"] if not identity.groups else [f"--groups={','.join(map(str, identity.groups))}"]
    )
    caps = []
    if identity.capabilities is not None:
        caps.append(",".join(["-all", *(f"+{c.lower()}" for c in sorted(identity.capabilities))]))
    return [
        SETPRIV,
        f"--reuid={identity.uid}",
        f"--regid={identity.gid}",
        *groups,
        *(f"--bounding-set={c}" for c in caps),
        "--inh-caps=-all",
        *(["--no-new-privs"] if identity.no_new_privs else []),
        "--",
        *argv,
    ]


def container_argv(identity: RunIdentity | None, argv: list[str]) -> list[str]:
    """What to exec for a container (or an exec probe in it) running as `identity`."""
    if identity is None or not can_change_identity():
        return list(argv)
    return run_as_argv(identity, argv)


# How long an exited container's pipes may stay open (a child still holding them) before its exit is
# reported anyway; normally both reach end-of-file as the process exits.
_DRAIN_SECONDS = 2.0


class ContainerProcess:
    """Start, poll and stop one container process; its whole process group goes with it."""

    def __init__(
        self,
        argv: list[str],
        env: Mapping[str, str],
        cwd: Path,
        log_path: Path,
        identity: RunIdentity | None = None,
    ) -> None:
        self.argv = argv
        self.identity = identity
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self._popen: subprocess.Popen[bytes] | None = None
        self._readers: list[threading.Thread] = []
        self._drained = False
        self.started_at = 0.0

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    @property
    def container_id(self) -> str:
        return f"sim://{self.pid}"

    def start_failure(self) -> str | None:
        """Why the runtime could not start the process at all; a local process has no such step."""
        return None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.cwd.mkdir(parents=True, exist_ok=True)
        self._popen = subprocess.Popen(
            container_argv(self.identity, self.argv),
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # Own session: SIGTERM reaches the container's children too, not our terminal's group.
            start_new_session=True,
        )
        self.started_at = time.monotonic()
        log = self.log_path.open("ab", buffering=0)
        lock = threading.Lock()
        pipes = (("stdout", self._popen.stdout), ("stderr", self._popen.stderr))
        self._readers = [
            threading.Thread(
                target=_copy_records, args=(pipe, stream, log, lock), name=f"log-{stream}", daemon=True
            )
            for stream, pipe in pipes
            if pipe is not None
        ]
        for reader in self._readers:
            reader.start()
        threading.Thread(target=_close_after, args=(self._readers, log), daemon=True).start()

    def exit_code(self) -> int | None:
        """None while running; an exit counts once its output is in the log file."""
        if self._popen is None:
            return None
        code = self._popen.poll()
        if code is not None:
            self._drain()
        return code

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
        self._drain()  # what it wrote on its way out is in the log before the pod can go
        return self._popen.returncode

    def _drain(self) -> None:
        if not self._drained:
            for reader in self._readers:
                reader.join(_DRAIN_SECONDS)
            self._drained = True

    def _signal(self, sig: signal.Signals) -> None:
        if self._popen is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._popen.pid, sig)


def _copy_records(pipe: IO[bytes], stream: str, log: IO[bytes], lock: threading.Lock) -> None:
    """Append each line from `pipe` as a CRI record, stamped when it arrived, until end-of-file."""
    with pipe:
        while chunk := pipe.readline(MAX_RECORD_BYTES):
            record = format_record(time.time_ns(), stream, chunk)
            with lock:
                log.write(record)


def _close_after(readers: list[threading.Thread], log: IO[bytes]) -> None:
    for reader in readers:
        reader.join()
    log.close()
