"""Node metadata one gpuop service writes and another must read (names only, and how to parse them).

The operator, the agents and `kubectl gpuop` (which only reads) all take these names from here, so a
rename cannot leave the doctor reading a label nobody writes any more.

The node labeller records the labels it owns in `LABELLER_OWNED_ANNOTATION` (comma-separated keys)
so that its next pod, and the operator's uninstall cleanup, remove exactly what it wrote.
"""

from __future__ import annotations

from collections.abc import Mapping

LABEL_PREFIX = "gpuop.dev/"
DEPLOY_LABEL_PREFIX = f"{LABEL_PREFIX}deploy."
# A deploy label set to `paused-for-<reason>` belongs to whoever paused it until they set it back.
PAUSED_PREFIX = "paused-for-"

# The operator's rollout (docs/operator.md): the owning DeviceConfig and the node's lifecycle stage.
OWNER_ANNOTATION = "gpuop.dev/deviceconfig"  # "<namespace>/<name>" of the DeviceConfig owning the node
STAGE_ANNOTATION = "gpuop.dev/stage"

# The operator's driver lifecycle: installed version, the upgrade walk's state, why it failed.
DRIVER_VERSION_LABEL = "gpuop.dev/driver.version"
DRIVER_UPGRADE_STATE_LABEL = "gpuop.dev/driver-upgrade-state"
DRIVER_FAILURE_ANNOTATION = "gpuop.dev/driver.failure"

# Node remediation (docs/remediation.md).
REMEDIATION_STATE_LABEL = "gpuop.dev/remediation-state"
REMEDIATION_ANNOTATION_PREFIX = "gpuop.dev/remediation."
REMEDIATION_FAILURE_ANNOTATION = REMEDIATION_ANNOTATION_PREFIX + "failure"
REMEDIATION_REPAIR_ANNOTATION = REMEDIATION_ANNOTATION_PREFIX + "repair"  # reset, clear-wait, reboot
REMEDIATION_TRIGGER_ANNOTATION = REMEDIATION_ANNOTATION_PREFIX + "trigger"

# The node labeller: GPU health as a Node condition, and the GPUs it counted.
GPU_HEALTHY_CONDITION = "GPUHealthy"
GPU_COUNT_LABEL = "gpuop.dev/gpu.count"
GPU_VENDOR_LABEL = "gpuop.dev/gpu.vendor"
GPU_MODEL_LABEL = "gpuop.dev/gpu.model"
GPU_PARTITION_COUNT_LABEL = "gpuop.dev/gpu.partition.count"
# The labeller's compute-partition mode of a node's GPUs (`mig`: every NVIDIA GPU has MIG enabled).
GPU_PARTITION_COMPUTE_LABEL = "gpuop.dev/gpu.partition.compute"
AMD_PARTITION_LABEL = "amd.com/gpu.compute-memory-partition"

# The config manager (docs/config-manager.md): the profile a node asks for, and how applying it went.
CONFIG_PROFILE_LABEL = "gpuop.dev/gpu-config-profile"
CONFIG_STATE_LABEL = "gpuop.dev/gpu-config-state"
CONFIG_NVIDIA_STATE_LABEL = "nvidia.com/mig.config.state"  # NVIDIA's MIG manager's, kept in step
CONFIG_AMD_STATE_LABEL = "dcm.amd.com/gpu-config-profile-state"  # AMD's device config manager's
CONFIG_FAILURE_ANNOTATION = "gpuop.dev/gpu-config-failure-reason"
CONFIG_PROGRESS_ANNOTATION = "gpuop.dev/gpu-config-progress"
CONFIG_RESULT_ANNOTATION = "gpuop.dev/gpu-config-result"

# The test runner's Node API (docs/test-runner.md).
TEST_REQUEST_ANNOTATION = "gpuop.dev/test-request"
TEST_RESULT_LABEL = "gpuop.dev/gpu.test-result"
TEST_RESULT_TIME_ANNOTATION = "gpuop.dev/gpu.test-result-time"
TEST_ANSWER_ANNOTATION = "gpuop.dev/test-result"

# What an agent writes on its Node that nothing else maintains, as (labels, annotations): the
# uninstall cleanup removes them once no pod of that agent runs on the node (a running one would
# write them straight back). The node labeller's own set is listed by LABELLER_OWNED_ANNOTATION.
# The request annotations and the profile label are the administrator's and stay.
AGENT_NODE_MARKS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "config-manager": (
        (CONFIG_STATE_LABEL, CONFIG_NVIDIA_STATE_LABEL, CONFIG_AMD_STATE_LABEL),
        (CONFIG_FAILURE_ANNOTATION, CONFIG_PROGRESS_ANNOTATION, CONFIG_RESULT_ANNOTATION),
    ),
    "test-runner": ((TEST_RESULT_LABEL,), (TEST_RESULT_TIME_ANNOTATION, TEST_ANSWER_ANNOTATION)),
}

# Node Feature Discovery's PCI presence labels: how a GPU node is found before any driver exists.
AMD_PRESENT_LABEL = "feature.node.kubernetes.io/pci-1002.present"
NVIDIA_PRESENT_LABEL = "feature.node.kubernetes.io/pci-10de.present"

LABELLER_OWNED_ANNOTATION = "gpuop.dev/node-labeller.owned-labels"


def deploy_label(service: str) -> str:
    """`gpuop.dev/deploy.<service>`: the label an operator-managed DaemonSet selects."""
    return f"{DEPLOY_LABEL_PREFIX}{service}"


def labeller_owned_keys(annotations: Mapping[str, str] | None) -> list[str]:
    """The keys listed in the labeller's ownership annotation (unvalidated, in order)."""
    raw = (annotations or {}).get(LABELLER_OWNED_ANNOTATION, "")
    return [part.strip() for part in raw.split(",") if part.strip()]


# The values those state labels take, in walk order (the operator's `upgrade.UpgradeState` and
# `remediation.State`; a test holds the two in step). The doctor reads them to tell the operator's
# cordon from an admin's.
DRIVER_UPGRADE_STATES = (
    "upgrade-required",
    "cordoned",
    "draining",
    "pod-restart",
    "upgrading",
    "rebooting",
    "validating",
    "upgrade-done",
    "upgrade-failed",
    # The uninstall walk (`uninstallPolicy: Uninstall`) shares cordoned .. pod-restart.
    "uninstall-required",
    "uninstalling",
    "uninstall-failed",
)
DRIVER_UNINSTALL_STATES = frozenset(DRIVER_UPGRADE_STATES[9:])
DRIVER_UPGRADE_CORDONING = frozenset(DRIVER_UPGRADE_STATES[1:7]) | {
    "upgrade-failed",
    "uninstalling",
    "uninstall-failed",
}
REMEDIATION_STATES = (
    "detected",
    "awaiting-approval",
    "tainted",
    "draining",
    "repairing",
    "validating",
    "recovered",
    "failed",
)
REMEDIATION_CORDONING = frozenset(REMEDIATION_STATES[2:6]) | {"failed"}
