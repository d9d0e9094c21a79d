"""The record kept on the Node while a profile is being applied, so a restarted agent resumes.

Written to the `gpuop.dev/gpu-config-progress` annotation before the first label is paused and
removed after the last one is restored: a pod that dies in between finds it and re-applies the same
profile (the writes are absolute, so applying twice is safe). Which labels to restore is the
operand pause's own annotation (gpuop_common.operandpause), written in the same patch.
"""

from __future__ import annotations

import json
import logging

from pydantic import BaseModel, ConfigDict, Field, ValidationError

log = logging.getLogger(__name__)


class Progress(BaseModel):
    model_config = ConfigDict(extra="forbid")

    profile: str = Field(max_length=63)
    digest: str = Field(max_length=64)
    phase: str = Field(pattern=r"^(quiescing|applying|reloading)$")
    started: float = 0.0  # wall-clock seconds when quiescing began

    def dump(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)


def parse_progress(raw: str | None) -> Progress | None:
    """The record, or None when absent; a garbled one is logged and treated as absent."""
    if not raw:
        return None
    try:
        return Progress.model_validate_json(raw)
    except ValidationError as exc:
        log.warning("ignoring unreadable progress annotation", extra={"error": str(exc).splitlines()[0]})
        return None


class Result(BaseModel):
    """What the last finished attempt was (annotation `gpuop.dev/gpu-config-result`)."""

    model_config = ConfigDict(extra="forbid")

    profile: str
    digest: str
    state: str

    def dump(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True)


def parse_result(raw: str | None) -> Result | None:
    if not raw:
        return None
    try:
        return Result.model_validate_json(raw)
    except ValidationError:
        return None
