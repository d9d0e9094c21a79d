"""A real driver install through the operator's Job, in process mode: the Job's pod runs
`gpuop-operator playbook driver-install` (real Ansible through ansible-runner) on a simulated node
that has its GPU on the PCI bus but no driver, with the host commands going to the recording fakes.
One node installs and its operands follow; on the other a failing DKMS build fails the Job, and the
task and its stderr reach an Event through the pod's termination message. Then an upgrade with
`rebootRequired` runs the real install over the loaded driver and the real `node-reboot` playbook.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from gpuop_common.gpu.amd import AmdSysfsBackend
from gpuop_operator.driverflow import FAILURE, VERSION_LABEL
from gpuop_operator.driverjob import JobSettings
from gpuop_operator.upgrade import STATE_LABEL
from gpuop_sim import hostfakes
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import NODES, Resource

pytestmark = pytest.mark.slow
NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
DKMS_ERROR = "amdgpu/6.12.0: make: *** [Makefile:12: amdgpu.ko] Error 2"
# The Jobs' host commands go to the recording fakes under each node's root.
JOBS_VIA_FAKES = JobSettings(
    namespace=NAMESPACE,
    release="gpuop",
    image="gpuop/gpuop-operator:0.1.0",
    host_exec=f"{sys.executable} -m gpuop_sim.hostfakes --root {{host_root}}",
    deadline_seconds=600,
)


@pytest.fixture(scope="module")
def cluster(kit: Any) -> Iterator[SimCluster]:
    with SimCluster(profiles=["amd-single", "amd-single"], pods="process", driver_loaded=False) as sim:
        kit.install_operands(sim.api(), ("node-labeller",))
        yield sim


def test_a_bare_node_gets_its_driver_from_the_job_and_a_failing_build_is_reported(
    cluster: SimCluster, kit: Any
) -> None:
    good, bad = (node.name for node in cluster.nodes)
    roots = {node.name: node.root for node in cluster.nodes}
    assert AmdSysfsBackend(roots[good]).enumerate() == []  # no driver yet
    hostfakes.fail(roots[bad], "dkms", DKMS_ERROR)
    api = cluster.api()
    spec = {"driver": {"enable": True, "version": "6.12"}, "devicePlugin": {"enable": False}}
    with kit.operator_running(cluster, jobs=JOBS_VIA_FAKES):
        api.create(DEVICECONFIGS, kit.device_config(spec=spec), NAMESPACE)
        cluster.wait_for(
            lambda: api.get(NODES, good)["metadata"]["labels"].get(VERSION_LABEL) == "6.12",
            timeout=240,
            what=f"driver installed on {good}",
        )
        cluster.wait_for(
            lambda: api.get(NODES, bad)["metadata"]["labels"].get(STATE_LABEL) == "upgrade-failed",
            timeout=240,
            what=f"{bad} failed",
        )
        cluster.wait_for(
            lambda: (
                api.get(NODES, good)["metadata"]["labels"].get("gpuop.dev/deploy.node-labeller") == "true"
            ),
            timeout=60,
            what="the operands after the driver",
        )
    assert [g.pci_address for g in AmdSysfsBackend(roots[good]).enumerate()]  # modprobe laid the tree
    assert (roots[good] / "var/lib/gpuop/driver/amd.json").is_file()  # the playbook's marker
    bad_node = api.get(NODES, bad)
    assert "gpuop.dev/deploy.node-labeller" not in bad_node["metadata"]["labels"]  # never rolled out
    assert "Error 2" in bad_node["metadata"]["annotations"][FAILURE]

    def failed(events: list[dict[str, Any]]) -> list[str]:
        return [
            e["message"]
            for e in events
            if e["reason"] == "DriverInstallFailed" and e["involvedObject"]["name"] == bad
        ]

    messages = failed(cluster.wait_for_events("default", failed, what=f"DriverInstallFailed on {bad}"))
    assert any("Error 2" in message and "task" in message for message in messages), messages


def test_an_upgrade_with_reboot_required_reboots_the_node_through_the_real_playbook(
    cluster: SimCluster, kit: Any
) -> None:
    """6.12 -> 6.13 on the installed node: drain, the real driver-install playbook over a loaded
    driver, then the real node-reboot playbook, whose fake `systemctl reboot` reboots the node."""
    good, bad = (node.name for node in cluster.nodes)
    api = cluster.api()
    boot_before = api.get(NODES, good)["status"]["nodeInfo"]["bootID"]
    # The failed node counts as unavailable, so the budget must leave room for one more.
    policy = {"rebootRequired": True, "maxParallelUpgrades": 1, "maxUnavailableNodes": 2}
    spec = {
        "driver": {"enable": True, "version": "6.13", "upgradePolicy": policy},
        "devicePlugin": {"enable": False},
    }
    with kit.operator_running(cluster, jobs=JOBS_VIA_FAKES):
        api.patch(DEVICECONFIGS, "gpus", {"spec": spec}, NAMESPACE)
        cluster.wait_for(
            lambda: api.get(NODES, good)["metadata"]["labels"].get(STATE_LABEL) == "upgrade-done",
            timeout=240,
            what=f"{good} upgrade-done",
        )
    node = api.get(NODES, good)
    assert node["metadata"]["labels"][VERSION_LABEL] == "6.13"
    assert node["status"]["nodeInfo"]["bootID"] != boot_before  # the playbook rebooted it
    assert not node["spec"].get("unschedulable")  # uncordoned after validation
    marker = json.loads((cluster.nodes[0].root / "var/lib/gpuop/driver/amd.json").read_text())
    assert marker["version"] == "6.13"
    assert api.get(NODES, bad)["metadata"]["labels"].get(STATE_LABEL) == "upgrade-failed"  # untouched


def test_an_upgrade_job_whose_image_cannot_be_pulled_is_reported_and_resumes_once_the_field_is_fixed(
    cluster: SimCluster, kit: Any
) -> None:
    """Bad input: `spec.driver.image` names an image no node can pull. A kubelet keeps the Job's pod
    Pending (ErrImagePull / ImagePullBackOff) and never fails it, so the Job stays active: the
    operator must say so itself (the node's state message, a Warning Event on the Node, Degraded on
    the DeviceConfig with a Warning Event, all naming the image and the field), and once the field
    is fixed it replaces the Job and the walk goes on to upgrade-done."""
    good, _bad = (node.name for node in cluster.nodes)
    api = cluster.api()
    unpullable = "registry.invalid/gpuop/no-such-driver:6.14"
    policy = {"rebootRequired": False, "maxParallelUpgrades": 1, "maxUnavailableNodes": 2}
    spec = {
        "driver": {"enable": True, "version": "6.14", "image": unpullable, "upgradePolicy": policy},
        "devicePlugin": {"enable": False},
    }

    def node_status() -> dict[str, Any]:
        status = api.get(DEVICECONFIGS, "gpus", NAMESPACE).get("status") or {}
        entry: dict[str, Any] = ((status.get("driver") or {}).get("nodes") or {}).get(good) or {}
        return entry

    with kit.operator_running(cluster, jobs=JOBS_VIA_FAKES):
        api.patch(DEVICECONFIGS, "gpus", {"spec": spec}, NAMESPACE)
        # On a kubelet that failed the pod this ended in upgrade-failed (backoffLimit 0) instead.
        seen = cluster.wait_for(
            lambda: (
                (
                    (entry := node_status()).get("state") == "upgrade-failed"
                    or "spec.driver.image" in entry.get("message", "")
                )
                and node_status()
            ),
            timeout=240,
            what=f"{good}'s upgrade Job reported as unpullable",
        )
        assert seen["state"] == "upgrading", seen
        assert unpullable in seen["message"] and "ImagePull" in seen["message"], seen
        status = api.get(DEVICECONFIGS, "gpus", NAMESPACE)["status"]
        assert status["nodes"][good] == "driver-image-unpullable"
        degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
        assert degraded["status"] == "True" and degraded["reason"] == "JobImagePullFailed", degraded
        assert unpullable in degraded["message"]

        def pull_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [e for e in events if e["reason"] in ("DriverImagePullFailed", "JobImagePullFailed")]

        found = pull_events(
            cluster.wait_for_events(
                None, lambda evs: len({e["reason"] for e in pull_events(evs)}) == 2, what="pull Events"
            )
        )
        assert {(e["involvedObject"]["kind"], e["type"]) for e in found} == {
            ("Node", "Warning"),
            ("DeviceConfig", "Warning"),
        }
        assert all(unpullable in e["message"] and "spec.driver.image" in e["message"] for e in found)
        # The person fixes the field: the stuck Job is replaced, the walk goes on.
        api.patch(DEVICECONFIGS, "gpus", {"spec": {"driver": {"image": None}}}, NAMESPACE)
        cluster.wait_for(
            lambda: api.get(NODES, good)["metadata"]["labels"].get(STATE_LABEL) == "upgrade-done",
            timeout=240,
            what=f"{good} upgrade-done after the image was fixed",
        )
    assert api.get(NODES, good)["metadata"]["labels"][VERSION_LABEL] == "6.14"
    conditions = api.get(DEVICECONFIGS, "gpus", NAMESPACE)["status"]["conditions"]
    assert not [c for c in conditions if c["reason"] == "JobImagePullFailed"]
