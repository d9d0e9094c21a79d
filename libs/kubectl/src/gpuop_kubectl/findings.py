"""The doctor's finding codes: stable names a runbook, a ticket or a search can refer to.

Each code names one broken link of the chain from DeviceConfig to schedulable GPUs, in the order
the doctor walks it (docs/doctor.md lists them with what to do). A code never changes meaning; a new
problem gets a new code.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Severity(StrEnum):
    ERROR = "error"  # the node does not serve GPUs (now): the doctor exits non-zero
    WARNING = "warning"  # it serves GPUs, but something needs a look


@dataclass(frozen=True)
class Code:
    code: str
    title: str
    severity: Severity = Severity.ERROR


S001 = Code("GPUOP-S001", "no DeviceConfig selects the node")
S002 = Code("GPUOP-S002", "several DeviceConfigs select the node")
S003 = Code("GPUOP-S003", "the node's DeviceConfig is not valid")
N001 = Code("GPUOP-N001", "node NotReady")
D001 = Code("GPUOP-D001", "driver being installed")
D002 = Code("GPUOP-D002", "driver upgrade in progress")
D003 = Code("GPUOP-D003", "driver build failed")
D004 = Code("GPUOP-D004", "driver upgrade failed")
D005 = Code("GPUOP-D005", "driver being uninstalled")
D006 = Code("GPUOP-D006", "driver uninstall failed")
D007 = Code("GPUOP-D007", "a per-node Job's image cannot be pulled")
P001 = Code("GPUOP-P001", "operand pod not scheduled")
P002 = Code("GPUOP-P002", "operand image cannot be pulled")
P003 = Code("GPUOP-P003", "operand in CrashLoopBackOff")
P004 = Code("GPUOP-P004", "operand running but not Ready")
P005 = Code("GPUOP-P005", "operand pod missing")
P006 = Code("GPUOP-P006", "operands paused")
P007 = Code("GPUOP-P007", "operand rollout in progress")
R001 = Code("GPUOP-R001", "device plugin registered but zero allocatable")
R002 = Code("GPUOP-R002", "fewer GPUs allocatable than the labeller counted", Severity.WARNING)
H001 = Code("GPUOP-H001", "GPU unhealthy")
H002 = Code("GPUOP-H002", "GPU health unknown", Severity.WARNING)
M001 = Code("GPUOP-M001", "remediation in progress")
M002 = Code("GPUOP-M002", "remediation failed")
C001 = Code("GPUOP-C001", "unknown partition profile")
C002 = Code("GPUOP-C002", "partitioning failed")
C003 = Code("GPUOP-C003", "partitioning in progress")
T001 = Code("GPUOP-T001", "cordoned by an admin")
T002 = Code("GPUOP-T002", "a taint keeps GPU pods off")

ALL_CODES: tuple[Code, ...] = (
    S001, S002, S003, N001, D001, D002, D003, D004, D005, D006, D007, P001, P002, P003, P004, P005, P006,
    P007,
    R001, R002, H001, H002, M001, M002, C001, C002, C003, T001, T002,
)  # fmt: skip


@dataclass(frozen=True)
class Finding:
    """One broken link on one node: what, the evidence read from the cluster, and what to do."""

    code: Code
    summary: str
    evidence: tuple[str, ...] = ()
    next_step: str = ""
    details: dict[str, str] = field(default_factory=dict)

    @property
    def is_error(self) -> bool:
        return self.code.severity is Severity.ERROR

    def to_json(self) -> dict[str, object]:
        return {
            "code": self.code.code,
            "title": self.code.title,
            "severity": self.code.severity.value,
            "summary": self.summary,
            "evidence": list(self.evidence),
            "next": self.next_step,
        }
