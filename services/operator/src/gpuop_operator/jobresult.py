"""What the operator hands a per-node playbook Job (`PlaybookVars`, the extra-vars file) and what the
Job reports back (`PlaybookSummary`): the contract between the two sides, free of Ansible imports.

The Job runs `gpuop-operator playbook <name> --host-root /host --extra-vars-file F`; that command
condenses the ansible-runner event stream into a `PlaybookSummary` and writes it as the container's
termination message. The operator reads it from the finished pod's
`status.containerStatuses[].state.terminated.message` to advance the node and to raise one Event per
failed task. The kubelet keeps at most 4096 bytes of a termination message, so the summary is
trimmed to fit (`to_termination_message`) rather than cut mid-JSON.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal, get_args

from gpuop_common.config.base import PciAddress
from gpuop_common.config.driver import DriverConfig
from pydantic import BaseModel, ConfigDict, Field

TERMINATION_MESSAGE_LIMIT = 4096  # bytes the kubelet keeps of /dev/termination-log
STDERR_TAIL_CHARS = 400  # per failed task, enough for a compiler or package-manager error line

# Built-in playbooks shipped in gpuop_operator/playbooks/<name>.yml (overridable by name).
PlaybookName = Literal["driver-install", "driver-uninstall", "node-reboot", "gpu-reset"]
PLAYBOOK_NAMES: tuple[str, ...] = get_args(PlaybookName)
RunStatus = Literal["successful", "failed", "timeout", "canceled"]


class TaskFailure(BaseModel):
    """One task that failed, as an Event on the Node will name it."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(description="The task's name in the playbook.")
    command: str = Field("", description="The host command the task ran, if it ran one.")
    message: str = Field("", description="Ansible's `msg` for the failure.")
    stderr_tail: str = Field("", max_length=STDERR_TAIL_CHARS, description="Last characters of stderr.")


class PlaybookSummary(BaseModel):
    """The outcome of one playbook run on one node."""

    model_config = ConfigDict(extra="forbid")

    playbook: str
    status: RunStatus
    rc: int
    changed: int = Field(0, description="Tasks that changed something (0 on an idempotent re-run).")
    ok: int = 0
    failed_tasks: list[TaskFailure] = Field(default_factory=list)
    facts: dict[str, str] = Field(
        default_factory=dict, description="What the run found out, e.g. os, kernel, driver version."
    )
    started_at: datetime
    finished_at: datetime

    @property
    def succeeded(self) -> bool:
        return self.status == "successful" and self.rc == 0

    def to_termination_message(self) -> str:
        """JSON within the kubelet's limit: drops failed-task detail from the end, then the facts."""
        summary = self
        while len((text := summary.model_dump_json()).encode()) > TERMINATION_MESSAGE_LIMIT:
            if summary.failed_tasks:
                summary = summary.model_copy(update={"failed_tasks": summary.failed_tasks[:-1]})
            elif summary.facts:
                summary = summary.model_copy(update={"facts": {}})
            else:
                break  # the bare summary is a few hundred bytes; only an absurd playbook name gets here
        return text


class PlaybookVars(BaseModel):
    """The extra-vars file the operator writes for a Job (the DeviceConfig's `driver` and the vendor)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    vendor: Literal["amd", "nvidia"] = Field(description="GPU vendor of the node.")
    driver: DriverConfig = Field(default_factory=DriverConfig, description="DeviceConfig spec.driver.")
    host_exec: str | None = Field(
        None,
        alias="hostExec",
        min_length=1,
        description="Prefix of every host command; `{host_root}` is replaced by --host-root; "
        "default `chroot {host_root}`.",
    )
    container_runtime: Literal["auto", "containerd", "crio", "none"] = Field(
        "auto", alias="containerRuntime", description="Runtime to enable CDI in; auto: the active one."
    )
    gpus: list[PciAddress] = Field(
        default_factory=list,
        max_length=64,
        description="PCI addresses of the GPUs a remediation playbook acts on (empty: every GPU).",
    )
    cdi_spec_dirs: list[str] = Field(
        default_factory=lambda: ["/etc/cdi", "/var/run/cdi"],
        alias="cdiSpecDirs",
        min_length=1,
        description="Directories the runtime searches for CDI specs (the device plugin writes /var/run/cdi).",
    )
