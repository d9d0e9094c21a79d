"""The driver uninstall walk (`uninstallPolicy: Uninstall`, on `enable: false` or deletion) (pure).

A node with gpuop's version label becomes `uninstall-required` and, within the same bounds as an
upgrade, walks cordon -> drain -> pause -> the driver-uninstall Job -> version label and walk marks
removed, operands resumed, uncordoned (not a node an admin had cordoned). A node without our label
(a driver that came with the node image) is never touched.

A Job running when the driver is disabled is never cut short: an install Job finishes first (a
Job with no Complete/Failed condition is running; a finished one kept by its TTL is not, and is
never mistaken for a fresh install), and what it installed is labelled and then uninstalled like
any other; a node mid-upgrade lets its install Job end, then runs the uninstall Job.

`DriverUninstaller` is `driverflow.DriverPlanner` with the uninstall hooks overridden, so the walk
shares every step (drain, pause, Job bookkeeping, failures) with the upgrade.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Unpack

from gpuop_common.config.driver import DriverConfig

from gpuop_operator.driverdefaults import LEGACY_DEFAULT, concrete_label
from gpuop_operator.driverflow import (
    ADMIN_CORDON,
    FAILURE,
    REPORTED,
    SINCE,
    STEP_ANNOTATIONS,
    VERSION_LABEL,
    DriverNodeState,
    DriverPlan,
    DriverPlanner,
    PassInputs,
    run_pass,
)
from gpuop_operator.driverjob import JobView
from gpuop_operator.model import NodeInfo
from gpuop_operator.upgrade import FAILED_STATES, UpgradeState

# uid of the install Job that was running when the driver was disabled: its success is ours to undo.
AWAITED_INSTALL = "gpuop.dev/driver.awaited-install"


class DriverUninstaller(DriverPlanner):
    def node_pass(self, node: NodeInfo, state: UpgradeState | None, vendor: str) -> None:
        version = node.labels.get(VERSION_LABEL)
        if not version:  # whatever else the labels say: no driver of ours is on this node (yet)
            self._unlabelled(node, state, vendor)
        elif state in (None, UpgradeState.DONE, UpgradeState.REQUIRED):
            self._patch(node, UpgradeState.UNINSTALL_REQUIRED, annotations={SINCE: None})
            self._state(node, UpgradeState.UNINSTALL_REQUIRED.value)
        elif state is UpgradeState.UNINSTALL_REQUIRED:
            self.waiting(node, state)
        elif state in FAILED_STATES:
            self._state(node, state.value, node.annotations.get(FAILURE, ""))
        else:
            self.walk(node, state, vendor)

    def _unlabelled(self, node: NodeInfo, state: UpgradeState | None, vendor: str) -> None:
        """A node without our label: left alone, unless our install Job is running there. That one
        is awaited (its uid noted on the node), and once it succeeded its driver is ours: labelled
        now, uninstalled by the walk. A finished Job nobody awaited (kept by its TTL, its node's
        label since removed by hand) is history, not a driver of ours."""
        job = self.jobs.get((node.name, "driver-install"))
        awaited = node.annotations.get(AWAITED_INSTALL)
        keep_since = {SINCE: node.annotations.get(SINCE)}
        if job is not None and job.pulling:
            # Its image never came: nothing ran, nothing to take off. It would wait for its deadline.
            self.plan.delete_jobs.append(job)
            job = None
        if job is not None and not job.deleting and job.phase == "running":
            if awaited != job.uid:
                self._patch(node, state, annotations={**keep_since, AWAITED_INSTALL: job.uid})
            self._state(node, "installing", "waiting for the running install Job, then uninstalling")
        elif job is not None and not job.deleting and job.phase == "succeeded" and awaited == job.uid:
            version = job.version or concrete_label(LEGACY_DEFAULT, vendor)
            self._patch(
                node,
                UpgradeState.UNINSTALL_REQUIRED,
                labels={VERSION_LABEL: version},
                annotations={SINCE: None, AWAITED_INSTALL: None},
                event=("DriverInstalled", f"driver {version} installed by Job {job.name}", False),
            )
            self._state(node, UpgradeState.UNINSTALL_REQUIRED.value, "installed after it was disabled")
        else:
            if awaited:  # it failed or went away: nothing of ours to take off
                self._patch(node, state, annotations={**keep_since, AWAITED_INSTALL: None})
            self._state(node, "not-installed", "no driver installed by gpuop: left alone")

    def _failure(self, *, install: bool) -> tuple[str, UpgradeState]:
        if install:
            return super()._failure(install=install)
        return "DriverUninstallFailed", UpgradeState.UNINSTALL_FAILED

    def _start_event(self, node: NodeInfo) -> tuple[str, str]:
        return (
            "DriverUninstallStarted",
            f"uninstalling driver {node.labels.get(VERSION_LABEL)}: node cordoned",
        )

    def _begin_job(self, node: NodeInfo, vendor: str) -> None:
        self._patch(node, UpgradeState.UNINSTALLING)
        self._job(node, "driver-uninstall", vendor)
        self._state(node, UpgradeState.UNINSTALLING.value)

    def _upgrade(self, node: NodeInfo, vendor: str) -> None:
        """Disabled mid-upgrade: the install Job ends, then the uninstall runs."""
        self._switch(node, vendor, "driver-install", UpgradeState.UNINSTALLING, "driver-uninstall")

    def _uninstalling(self, node: NodeInfo, vendor: str) -> None:
        job = self._job(node, "driver-uninstall", vendor)
        if job is None or job.phase == "running":
            self._state(node, UpgradeState.UNINSTALLING.value, "driver-uninstall Job running")
            return
        if job.phase == "failed":
            if job.uid not in self.failed_runs:
                self._state(node, UpgradeState.UNINSTALLING.value)  # its pod's report is read first
                return
            self._fail(node, f"driver uninstall Job {job.name} failed ({job.reason or 'Failed'})", job)
            return
        # Done: gpuop's marks go, the operands come back (on whatever driver the node has now),
        # and the node is schedulable again unless an admin had cordoned it.
        self.plan.delete_jobs.append(job)  # a later install must not mistake it for its own
        self._patch(
            node,
            None,
            labels={**self.resumed(node), VERSION_LABEL: None},
            annotations={**dict.fromkeys(STEP_ANNOTATIONS, None), FAILURE: None, REPORTED: None},
            unschedulable=False if node.annotations.get(ADMIN_CORDON) != "true" else None,
            event=(
                "DriverUninstalled",
                f"driver {node.labels.get(VERSION_LABEL)} uninstalled by Job {job.name}",
                False,
            ),
        )
        self.plan.states[node.name] = DriverNodeState("uninstalled", "", "", "")


def plan_uninstall(
    driver: DriverConfig,
    nodes: Sequence[NodeInfo],
    jobs: Mapping[tuple[str, str], JobView],
    **inputs: Unpack[PassInputs],
) -> DriverPlan:
    """One pass of the uninstall walk over a DeviceConfig's nodes; arguments as `plan_driver`."""
    return run_pass(DriverUninstaller(driver, jobs, **inputs), nodes)
