"""The driver uninstall walk (driveruninstall) against conftest's `DriverWorld`, pass by pass."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from gpuop_operator.driverdefaults import default_driver_versions
from gpuop_operator.driverflow import FAILURE, VERSION_LABEL
from gpuop_operator.driverjob import JobPhase, JobView
from gpuop_operator.driveruninstall import AWAITED_INSTALL
from gpuop_operator.model import deploy_label
from gpuop_operator.upgrade import IN_FLIGHT, STATE_LABEL, parse_state

DP = deploy_label("device-plugin")


def test_uninstall_walks_each_gpuop_node_within_the_bounds_and_leaves_a_preinstalled_driver(pk: Any) -> None:
    world = pk.installed_world(uninstall=True)
    world.nodes["n1"] = dataclasses.replace(world.nodes["n1"], unschedulable=True)  # an admin's cordon
    seen_in_flight = 0
    for _ in range(40):
        plan = world.step(pk.driver(maxParallelUpgrades=1, maxUnavailableNodes=2))
        in_flight = [n for n, s in world.states().items() if parse_state(s) in IN_FLIGHT]
        seen_in_flight = max(seen_in_flight, len(in_flight))
        if all(
            VERSION_LABEL not in world.nodes[n].labels and world.states()[n] is None
            for n in ("n0", "n1", "n2")
        ):
            break
    assert seen_in_flight == 1
    assert sorted(n for n, op in world.created) == ["n0", "n1", "n2"]
    assert {op for _, op in world.created} == {"driver-uninstall"}
    for name in ("n0", "n1", "n2"):
        node = world.nodes[name]
        assert VERSION_LABEL not in node.labels and STATE_LABEL not in node.labels
        assert node.labels[DP] == "true"  # the paused operand is back
        assert not any(k.startswith("gpuop.dev/driver-upgrade.") for k in node.annotations)
    assert not world.nodes["n0"].unschedulable and world.nodes["n1"].unschedulable  # admin's kept
    assert world.nodes["own-driver"] == pk.installed_world().nodes["own-driver"]  # never touched
    assert plan.states["own-driver"].state == "not-installed"
    assert [r for _, r, _ in world.events if r == "DriverUninstalled"] == ["DriverUninstalled"] * 3
    assert not world.jobs  # the finished uninstall Jobs are deleted: a later install starts fresh


def test_a_failed_uninstall_stops_the_node_cordoned_with_the_reason(pk: Any) -> None:
    world = pk.installed_world(1, uninstall=True, fail_jobs_on={"n0"})
    for _ in range(10):
        world.step(pk.driver())
    node = world.nodes["n0"]
    assert node.labels[STATE_LABEL] == "uninstall-failed" and node.unschedulable
    assert node.labels[VERSION_LABEL] == "6.2"  # still there: the driver may be half gone
    assert "dkms build failed" in node.annotations[FAILURE]
    assert any(r == "DriverUninstallFailed" for _, r, _ in world.events)


def test_enabled_again_mid_uninstall_lets_the_job_finish_then_reinstalls(pk: Any) -> None:
    world = pk.installed_world(1, uninstall=True, job_passes=3)
    while world.states()["n0"] != "uninstalling":
        world.step(pk.driver())
    world.uninstall = False
    plan = world.step(pk.driver())
    assert [j for j in plan.create_jobs if j.node == "n0"] == []  # the uninstall is not cut short
    assert world.states()["n0"] == "uninstalling"
    for _ in range(20):
        world.step(pk.driver())
        if world.states()["n0"] == "upgrade-done":
            break
    assert [op for n, op in world.created if n == "n0"][:2] == ["driver-uninstall", "driver-install"]
    assert world.nodes["n0"].labels[VERSION_LABEL] == "6.2" and world.nodes["n0"].labels[DP] == "true"


def test_an_install_job_running_when_the_driver_is_disabled_finishes_then_is_uninstalled(pk: Any) -> None:
    """The install is not cut short; what it installed is labelled and walks the uninstall like any
    other node, so the node ends with nothing of gpuop's on it."""
    world = pk.world({"n0": pk.gpu_node("n0", **{DP: "true"})}, job_passes=3)
    world.operand_pods = {("n0", "device-plugin")}
    world.step(pk.driver("6.2"))
    assert world.jobs[("n0", "driver-install")].phase == "running"
    world.uninstall = True
    plan = world.step(pk.driver("6.2"))
    assert plan.create_jobs == [] and plan.delete_jobs == []  # the running Job is left alone
    assert plan.states["n0"].state == "installing" and VERSION_LABEL not in world.nodes["n0"].labels
    for _ in range(20):
        world.step(pk.driver("6.2"))
        if ("n0", "driver-uninstall") in world.created and not world.jobs:
            break
    assert world.created == [("n0", "driver-install"), ("n0", "driver-uninstall")]
    node = world.nodes["n0"]
    assert VERSION_LABEL not in node.labels and STATE_LABEL not in node.labels
    assert not node.unschedulable and node.labels[DP] == "true"
    assert AWAITED_INSTALL not in node.annotations
    reasons = [r for _, r, _ in world.events]
    assert reasons.index("DriverInstalled") < reasons.index("DriverUninstalled")


@pytest.mark.parametrize("phase", ["succeeded", "failed"])
def test_a_finished_install_job_kept_by_its_ttl_is_neither_waited_for_nor_uninstalled(
    pk: Any, phase: JobPhase
) -> None:
    """A finished install Job nobody saw running after the flip (its node's label removed since,
    say, to hand the node a driver of its own) is history: the node is left alone."""
    world = pk.world({"n0": pk.gpu_node("n0")}, uninstall=True)
    world.jobs[("n0", "driver-install")] = JobView("j", "uid-1", "n0", "driver-install", "6.2", phase)
    for _ in range(3):
        plan = world.step(pk.driver("6.2"))
        assert plan.states["n0"].state == "not-installed"
        assert plan.patches == plan.start_patches == [] and plan.create_jobs == []


def test_a_legacy_default_label_is_uninstalled_as_the_vendors_default_version(pk: Any) -> None:
    world = pk.world({"n0": pk.gpu_node("n0", **{VERSION_LABEL: "default"})}, uninstall=True)
    default = default_driver_versions()["amd"]
    plan = world.step(pk.driver(""))
    assert plan.states["n0"].version == default
    for _ in range(10):
        if ("n0", "driver-uninstall") in world.jobs:
            break
        world.step(pk.driver(""))
    assert world.jobs[("n0", "driver-uninstall")].version == default


def test_an_awaited_install_job_that_fails_leaves_the_node_unlabelled_and_unmarked(pk: Any) -> None:
    world = pk.world({"n0": pk.gpu_node("n0")}, job_passes=2, fail_jobs_on={"n0"})
    world.step(pk.driver("6.2"))
    world.uninstall = True
    world.step(pk.driver("6.2"))
    assert world.nodes["n0"].annotations[AWAITED_INSTALL] == world.jobs[("n0", "driver-install")].uid
    for _ in range(3):
        plan = world.step(pk.driver("6.2"))
    assert plan.states["n0"].state == "not-installed" and world.created == [("n0", "driver-install")]
    assert AWAITED_INSTALL not in world.nodes["n0"].annotations
    assert VERSION_LABEL not in world.nodes["n0"].labels


def test_an_install_job_stuck_pulling_when_the_driver_is_disabled_is_deleted_not_awaited(pk: Any) -> None:
    """Bad input: an unpullable spec.driver.image, then enable: false with Uninstall. Its pod never
    started, so nothing was installed: waiting for it would wait for its deadline."""
    world = pk.world({"n0": pk.gpu_node("n0", **{DP: "true"})})
    bad = "registry.invalid/gpuop/driver:6.2"
    world.unpullable = {bad}
    broken = pk.driver("6.2").model_copy(update={"image": bad})
    world.step(broken)
    assert world.jobs[("n0", "driver-install")].pulling
    world.uninstall = True
    plan = world.step(broken)
    assert [j.operation for j in plan.delete_jobs] == ["driver-install"]
    assert plan.states["n0"].state == "not-installed"
    world.step(broken)
    assert not world.jobs and world.created == [("n0", "driver-install")]
    assert (
        VERSION_LABEL not in world.nodes["n0"].labels and AWAITED_INSTALL not in world.nodes["n0"].annotations
    )
