"""Plain data the planning functions work on: nodes, operand pods, and the names written on nodes.

The reconciler turns API objects into these (see `views`), so planning stays pure and testable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Names on the node come from gpuop_common.nodemeta, which `kubectl gpuop` reads too; re-exported
# here for the planning modules. A deploy label set to `paused-for-<reason>` belongs to whoever
# paused it until they set it back: the operator neither restores it to "true" nor waits on it.
from gpuop_common.nodemeta import AMD_PRESENT_LABEL as AMD_PRESENT
from gpuop_common.nodemeta import (
    LABEL_PREFIX,
    OWNER_ANNOTATION,
    PAUSED_PREFIX,
    REMEDIATION_STATE_LABEL,
    STAGE_ANNOTATION,
    deploy_label,
)
from gpuop_common.nodemeta import NVIDIA_PRESENT_LABEL as NVIDIA_PRESENT

# What the planning modules import from here besides the names defined below.
__all__ = [
    "LABEL_PREFIX",
    "OWNER_ANNOTATION",
    "PAUSED_PREFIX",
    "REMEDIATION_STATE_LABEL",
    "STAGE_ANNOTATION",
    "deploy_label",
]

# Rollout order (architecture.md section 4): a node gets a stage's deploy labels only once every
# operand of the previous stage is Ready on it. The DRA driver takes the device plugin's place.
STAGES: tuple[tuple[str, ...], ...] = (
    ("driver",),
    ("device-plugin", "dra-driver", "node-labeller"),
    ("metrics-exporter",),
    ("config-manager", "test-runner"),
)
# The order the operator pauses a node's operands in (gpuop_common.operandpause): the rollout's.
OPERANDS: tuple[str, ...] = tuple(service for stage in STAGES for service in stage)
# Operands whose service exists in this release; enabling any other section is reported Unsupported.
SUPPORTED_SERVICES: frozenset[str] = frozenset(
    {
        "driver",
        "device-plugin",
        "dra-driver",
        "node-labeller",
        "metrics-exporter",
        "test-runner",
        "config-manager",
    }
)
# Stages run by the operator itself (per-node playbook Jobs), not by a DaemonSet and a deploy label.
JOB_SERVICES: frozenset[str] = frozenset({"driver"})
# Extra DaemonSets of an operand's chart, by their pods' name label -> the operand. Their pods share
# the operand's stage and deploy label: a node's teardown waits until they are gone too, but a
# stage's readiness does not wait for them (the device plugin itself advertises MPS replicas only
# once the MPS control daemon says it runs, and the daemon runs only where sharing.mps is set).
COMPANION_PODS: Mapping[str, str] = {"device-plugin-mps": "device-plugin"}
# Sections the operator runs itself that are no service of their own (no chart, no stage).
OPERATOR_SECTIONS: frozenset[str] = frozenset({"remediation"})

FINALIZER = "gpuop.dev/node-cleanup"

# Lifecycle stages a node can be in (the value of STAGE_ANNOTATION and of status.nodes).
DISCOVERED = "discovered"
DRIVER_INSTALLING = "driver-installing"
OPERANDS_ROLLING = "operands-rolling"
DRIVER_UPGRADING = "driver-upgrading"
DRIVER_UNINSTALLING = "driver-uninstalling"  # uninstallPolicy: Uninstall, the node in the walk
DRIVER_FAILED = "driver-failed"
# A driver step's Job cannot pull its image (the kubelet keeps its pod Pending, never failing it):
# the walk waits for `spec.driver.image` to be fixed or for the Job's deadline.
DRIVER_IMAGE_UNPULLABLE = "driver-image-unpullable"
READY = "ready"
REMOVING = "removing"


@dataclass(frozen=True)
class NodeCondition:
    status: str  # True, False, Unknown
    since: float = 0.0  # lastTransitionTime, epoch seconds; 0 when missing or unparsable
    reason: str = ""
    message: str = ""


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    # What the driver lifecycle needs of the node (views.trim_node keeps these).
    unschedulable: bool = False  # spec.unschedulable, whoever set it
    ready: bool = True  # the Ready condition
    boot_id: str = ""  # status.nodeInfo.bootID: changes on every reboot
    gpus_allocatable: int = 0  # sum of status.allocatable GPU resources (whole GPUs and partitions)
    # What remediation needs: the conditions other than Ready, by type, and spec.taints.
    conditions: Mapping[str, NodeCondition] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    resource_version: str = ""

    def vendors(self) -> frozenset[str]:
        """GPU vendors NFD found on the node (PCI presence labels)."""
        found = set()
        if self.labels.get(AMD_PRESENT) == "true":
            found.add("amd")
        if self.labels.get(NVIDIA_PRESENT) == "true":
            found.add("nvidia")
        return frozenset(found)


@dataclass(frozen=True)
class PodInfo:
    """An operand pod: which service (chart name), on which node, whether it is Ready."""

    service: str
    node: str
    ready: bool
    terminating: bool = False


@dataclass(frozen=True)
class NodePatch:
    """One merge patch of a node's labels and annotations (None deletes a key), and its cordon."""

    node: str
    labels: Mapping[str, str | None] = field(default_factory=dict)
    annotations: Mapping[str, str | None] = field(default_factory=dict)
    unschedulable: bool | None = None  # None: leave spec.unschedulable alone
    # The whole new spec.taints (a merge patch replaces the list), None: leave them alone. Sent with
    # `resource_version`, so a taint someone else added since the read fails the patch (409, retried)
    # instead of being dropped.
    taints: tuple[Mapping[str, str], ...] | None = None
    resource_version: str = ""

    def body(self) -> dict[str, object]:
        metadata: dict[str, object] = {}
        if self.labels:
            metadata["labels"] = dict(self.labels)
        if self.annotations:
            metadata["annotations"] = dict(self.annotations)
        body: dict[str, object] = {"metadata": metadata}
        spec: dict[str, object] = {}
        if self.unschedulable is not None:
            # null, not false, uncordons: the field is then absent, as `kubectl uncordon` leaves it.
            spec["unschedulable"] = True if self.unschedulable else None
        if self.taints is not None:
            spec["taints"] = [dict(t) for t in self.taints] or None
            if self.resource_version:
                metadata["resourceVersion"] = self.resource_version
        if spec:
            body["spec"] = spec
        return body


# Node remediation (docs/remediation.md): the approval a person sets (the state label is nodemeta's).
REMEDIATION_APPROVED_LABEL = "gpuop.dev/remediation-approved"
# States in which a node's remediation owns it: a driver upgrade does not start there.
REMEDIATION_ACTIVE = frozenset({"tainted", "draining", "repairing", "validating"})
