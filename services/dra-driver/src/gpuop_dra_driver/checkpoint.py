"""Prepared claims on disk, so a restarted driver neither leaks nor prepares a claim twice.

One JSON file in the plugin's directory, replaced atomically on every change. A file that cannot
be read is moved aside (and logged), never fatal: the CDI specs are named by claim uid, so
unprepare still removes them and a repeated prepare rewrites the same file.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger(__name__)

CHECKPOINT_VERSION = 1


class PreparedDevice(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    requests: tuple[str, ...]
    pool: str
    device: str
    cdi_ids: tuple[str, ...]


class PreparedClaim(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    name: str
    devices: tuple[PreparedDevice, ...]


class CheckpointFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = CHECKPOINT_VERSION
    claims: dict[str, PreparedClaim] = Field(default_factory=dict)


class Checkpoint:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.claims: dict[str, PreparedClaim] = self._load()

    def _load(self) -> dict[str, PreparedClaim]:
        if not self.path.exists():
            return {}
        try:
            data = CheckpointFile.model_validate_json(self.path.read_bytes())
            if data.version != CHECKPOINT_VERSION:
                raise ValueError(f"version {data.version}, expected {CHECKPOINT_VERSION}")
            return dict(data.claims)
        except (OSError, ValueError, ValidationError) as exc:
            aside = self.path.with_name(f"{self.path.name}.bad-{int(time.time())}")
            log.error(
                "checkpoint unreadable; moved aside, starting empty",
                extra={"path": str(self.path), "moved_to": str(aside), "error": str(exc)[:500]},
            )
            with contextlib.suppress(OSError):
                os.replace(self.path, aside)
            return {}

    def _save(self) -> None:
        text = CheckpointFile(claims=self.claims).model_dump_json(indent=1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".checkpoint-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def get(self, uid: str) -> PreparedClaim | None:
        return self.claims.get(uid)

    def put(self, uid: str, claim: PreparedClaim) -> None:
        self.claims[uid] = claim
        self._save()

    def remove(self, uid: str) -> None:
        if self.claims.pop(uid, None) is not None:
            self._save()
