"""Pausing a node's GPU operands around work that needs the GPUs to itself (pure functions).

The driver upgrade and uninstall (the driver module is replaced), remediation (a GPU reset: the
driver refuses it while any process holds the GPU open, and the labeller, exporter, device plugin,
DRA driver and test runner all do) and the config manager (a repartition: the partition write
answers EBUSY / NVML InUse while a process holds the GPU) all use this one mechanism:

- pause: each running operand's deploy label `gpuop.dev/deploy.<service>=true` is set to
  `paused-for-<reason>` (its DaemonSet no longer selects the node, so its pod goes), and the labels
  paused are listed in the walk's own annotation, written in the same patch;
- resume: exactly the listed labels still carrying this walk's value go back to `true` (an operand
  someone else paused or turned off meanwhile is theirs and stays), and the annotation goes.

A walk that is interrupted (its agent or the operator restarted) finds its annotation and labels on
the Node and pauses again: what is already paused stays listed, so the resume after the restart
sets back everything the first run paused. A label carrying this walk's value that the annotation
does not list (an annotation lost, or removed by hand) is adopted: nobody else writes that value.

Callers pass the node's labels and annotations and their operands in the order they pause them
(the operator's rollout order, the config manager's `pausedOperands`), and apply the patches.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuop_common.nodemeta import DEPLOY_LABEL_PREFIX, PAUSED_PREFIX, deploy_label

Patch = dict[str, str | None]  # a merge-patch of labels or annotations: None removes the key


@dataclass(frozen=True)
class OperandPause:
    """One kind of walk's pause: its label value `paused-for-<reason>` and its annotation."""

    reason: str  # `driver-upgrade`, `remediation`, `config-change`
    annotation: str  # comma-separated deploy labels this walk paused
    by: str  # who pauses for this reason, in words (for `kubectl gpuop doctor`)

    @property
    def value(self) -> str:
        return f"{PAUSED_PREFIX}{self.reason}"

    def running(self, labels: Mapping[str, str], operands: Sequence[str]) -> list[str]:
        """Deploy labels of the operands still deployed on the node (in the given order)."""
        return [deploy_label(s) for s in operands if labels.get(deploy_label(s)) == "true"]

    def paused(self, annotations: Mapping[str, str]) -> list[str]:
        """The deploy labels this walk's annotation lists (unvalidated, in order)."""
        return [part.strip() for part in annotations.get(self.annotation, "").split(",") if part.strip()]

    def pause(
        self, labels: Mapping[str, str], annotations: Mapping[str, str], operands: Sequence[str]
    ) -> tuple[Patch, Patch]:
        """(labels, annotations) patches pausing every running operand; both empty when none runs
        and the annotation already lists every label carrying this walk's value."""
        running = self.running(labels, operands)
        ours = [deploy_label(s) for s in operands if labels.get(deploy_label(s)) == self.value]
        listed = sorted({*self.paused(annotations), *running, *ours})
        annotation_patch: Patch = {}
        if listed != sorted(set(self.paused(annotations))):
            annotation_patch[self.annotation] = ",".join(listed)
        return dict.fromkeys(running, self.value), annotation_patch

    def left(self, annotations: Mapping[str, str], services_on_node: Iterable[str]) -> list[str]:
        """The services this walk paused whose pods are still on the node."""
        services = {label.removeprefix(DEPLOY_LABEL_PREFIX) for label in self.paused(annotations)}
        return sorted({s for s in services_on_node if s in services})

    def resumed(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> Patch:
        """The deploy labels this walk paused, set back to "true" (not one someone else changed)."""
        return {label: "true" for label in self.paused(annotations) if labels.get(label) == self.value}

    def resume(self, labels: Mapping[str, str], annotations: Mapping[str, str]) -> tuple[Patch, Patch]:
        """(labels, annotations) patches ending the walk's pause: its labels back, its annotation gone."""
        done: Patch = {self.annotation: None} if self.annotation in annotations else {}
        return self.resumed(labels, annotations), done


DRIVER_UPGRADE_PAUSE = OperandPause(
    "driver-upgrade", "gpuop.dev/driver-upgrade.paused", "the driver upgrade or uninstall (operator)"
)
REMEDIATION_PAUSE = OperandPause("remediation", "gpuop.dev/remediation.paused", "a GPU reset (remediation)")
CONFIG_CHANGE_PAUSE = OperandPause("config-change", "gpuop.dev/gpu-config-paused", "the config manager")
PAUSES = (DRIVER_UPGRADE_PAUSE, REMEDIATION_PAUSE, CONFIG_CHANGE_PAUSE)


def paused_operands(labels: Mapping[str, str]) -> dict[str, str]:
    """service -> reason for each operand some walk has paused on the node (any reason)."""
    return {
        key.removeprefix(DEPLOY_LABEL_PREFIX): value.removeprefix(PAUSED_PREFIX)
        for key, value in sorted(labels.items())
        if key.startswith(DEPLOY_LABEL_PREFIX) and value.startswith(PAUSED_PREFIX)
    }
