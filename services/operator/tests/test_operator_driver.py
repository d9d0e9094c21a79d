"""The driver lifecycle through the real reconciler against a stub-pod simulated cluster.

Stub Job pods succeed at once (the playbooks themselves are tested in test_playbooks.py), so these
tests see what the operator does with the API: the Jobs it creates and their pod spec, the install
gating of the operand labels, and the rolling upgrade's bounds, watched on every Node event.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from gpuop_operator.driverflow import VERSION_LABEL
from gpuop_operator.driverjob import DEFAULT_JOB_IMAGE, JobSettings
from gpuop_operator.overridecheck import REASON
from gpuop_operator.upgrade import IN_FLIGHT, STATE_LABEL, UpgradeState, parse_state
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import DEPLOYMENTS, JOBS, NODES, Resource
from kubernetes import client, config, watch

pytestmark = pytest.mark.slow
NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
DP = "gpuop.dev/deploy.device-plugin"
GPU_NODES = ("amd-0", "amd-1", "amd-2", "nvidia-0")


@pytest.fixture(scope="module")
def cluster(kit: Any) -> Iterator[SimCluster]:
    with SimCluster(amd_nodes=3, nvidia_nodes=1, cpu_nodes=0, pods="stub") as sim:
        kit.install_operands(sim.api())
        # What the device plugins would advertise: the upgrade's validation waits for GPUs here.
        for name in GPU_NODES:
            resource = "amd.com/gpu" if name.startswith("amd") else "nvidia.com/gpu"
            sim.api().patch(NODES, name, {"status": {"allocatable": {resource: "8"}}}, sub="status")
        yield sim


def driver_spec(version: str, **policy: Any) -> dict[str, Any]:
    return {
        "driver": {"enable": True, "version": version, "upgradePolicy": {"rebootRequired": False, **policy}}
    }


def node_labels(cluster: SimCluster, name: str) -> dict[str, str]:
    return dict(cluster.api().get(NODES, name)["metadata"]["labels"])


class NodeWatcher:
    """Every Node event from a background watch: the upgrade bounds are checked on each one."""

    def __init__(self, cluster: SimCluster) -> None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        self.api = client.ApiClient(configuration)
        self.states: dict[str, tuple[str | None, bool]] = {}
        self.widest_in_flight = 0
        self.widest_unavailable = 0
        self.watch = watch.Watch()  # type: ignore[no-untyped-call]
        self.synced = threading.Event()  # every GPU node seen: later changes all come as events
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        # A fast walk could otherwise finish before the watch's first list, and be missed whole.
        if not self.synced.wait(60):
            raise AssertionError("the node watcher did not list the GPU nodes within 60 s")

    def _run(self) -> None:
        # stop() closes the connection under the stream.
        with contextlib.suppress(urllib3.exceptions.HTTPError, OSError):
            self._follow()

    def _follow(self) -> None:
        core = client.CoreV1Api(self.api)
        for event in self.watch.stream(core.list_node, timeout_seconds=300):
            node = event["object"]
            labels = node.metadata.labels or {}
            if node.metadata.name not in GPU_NODES:
                continue
            self.states[node.metadata.name] = (labels.get(STATE_LABEL), bool(node.spec.unschedulable))
            states = [(parse_state(s), cordoned) for s, cordoned in self.states.values()]
            in_flight = sum(1 for s, _ in states if s in IN_FLIGHT)
            unavailable = sum(
                1 for s, cordoned in states if s in IN_FLIGHT or s is UpgradeState.FAILED or cordoned
            )
            self.widest_in_flight = max(self.widest_in_flight, in_flight)
            self.widest_unavailable = max(self.widest_unavailable, unavailable)
            if len(self.states) == len(GPU_NODES):
                self.synced.set()

    def stop(self) -> None:
        self.watch.stop()
        self.api.close()


def test_fresh_nodes_get_one_privileged_job_each_and_operands_only_after_it(
    cluster: SimCluster, kit: Any
) -> None:
    api = cluster.api()
    with kit.operator_running(cluster):
        api.create(DEVICECONFIGS, kit.device_config(spec=driver_spec("6.2")), NAMESPACE)
        dc = cluster.wait_for_object(
            DEVICECONFIGS,
            "gpus",
            NAMESPACE,
            lambda d: (d.get("status") or {}).get("readyNodes") == len(GPU_NODES),
            timeout=90,
        )
    assert dc["status"]["driver"]["summary"] == f"{len(GPU_NODES)}/{len(GPU_NODES)} at 6.2"
    assert dc["status"]["operands"]["driver"] == {"desired": len(GPU_NODES), "ready": len(GPU_NODES)}
    for name in GPU_NODES:
        labels = node_labels(cluster, name)
        assert labels[VERSION_LABEL] == "6.2" and labels[DP] == "true"
    jobs, _ = api.list(JOBS, NAMESPACE)
    ours = {j["metadata"]["annotations"]["gpuop.dev/node"]: j for j in jobs}
    assert sorted(ours) == sorted(GPU_NODES)  # one per node
    job = ours["amd-0"]
    assert job["metadata"]["name"] == "gpuop-driver-amd-0"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["activeDeadlineSeconds"] > 0
    assert job["spec"]["ttlSecondsAfterFinished"] > 0
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeName"] == "amd-0" and pod["hostPID"] is True
    assert pod["tolerations"] == [{"operator": "Exists"}]
    container = pod["containers"][0]
    assert container["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsGroup": 0}
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert container["args"][:6] == [
        "playbook",
        "driver-install",
        "--host-root",
        "/host",
        "--extra-vars-file",
        "/etc/gpuop/playbook/vars.json",
    ]
    vars_json = job["spec"]["template"]["metadata"]["annotations"]["gpuop.dev/playbook-vars"]
    assert '"vendor":"amd"' in vars_json and '"version":"6.2"' in vars_json
    cluster.wait_for_events(
        "default",
        lambda events: (
            {e["involvedObject"]["name"] for e in events if e["reason"] == "DriverInstalled"}
            >= set(GPU_NODES)
        ),
        what="DriverInstalled on every GPU node",
    )


def test_a_version_change_rolls_one_node_at_a_time_and_keeps_an_admin_cordon(
    cluster: SimCluster, kit: Any
) -> None:
    api = cluster.api()
    api.patch(NODES, "amd-1", {"spec": {"unschedulable": True}})  # an admin's cordon
    # The operator's own pod runs on amd-0, as on a one-node cluster: the drain must leave it there.
    api.create(DEPLOYMENTS, kit.operator_deployment("amd-0"), NAMESPACE)
    cluster.wait_for(lambda: len(kit.operator_pods(cluster)) == 1, timeout=30, what="the operator's pod")
    operator_before = kit.operator_pods(cluster)
    watcher = NodeWatcher(cluster)
    try:
        # No resync to fall back on: each step's own writes must lead to the next pass.
        with kit.operator_running(cluster, resync_interval=3600):
            api.patch(
                DEVICECONFIGS,
                "gpus",
                {"spec": driver_spec("6.3", maxParallelUpgrades=1, maxUnavailableNodes=2)},
                NAMESPACE,
            )
            cluster.wait_for(
                lambda: all(node_labels(cluster, n).get(STATE_LABEL) == "upgrade-done" for n in GPU_NODES),
                timeout=180,
                what="every GPU node upgrade-done",
            )
            dc = cluster.wait_for_object(
                DEVICECONFIGS,
                "gpus",
                NAMESPACE,
                lambda d: (d.get("status") or {}).get("driver", {}).get("summary") == "4/4 at 6.3",
                timeout=60,
            )
            operator_after = kit.operator_pods(cluster)
    finally:
        watcher.stop()
        api.delete(DEPLOYMENTS, "gpuop-operator", NAMESPACE)
    assert operator_after == operator_before  # never evicted by amd-0's drain
    assert watcher.widest_in_flight == 1
    assert watcher.widest_unavailable <= 2
    assert api.get(NODES, "amd-1")["spec"].get("unschedulable") is True
    assert not api.get(NODES, "amd-0")["spec"].get("unschedulable")
    assert all(node_labels(cluster, n)[VERSION_LABEL] == "6.3" for n in GPU_NODES)
    assert all(node_labels(cluster, n)[DP] == "true" for n in GPU_NODES)  # operands resumed
    assert dc["status"]["driver"]["states"] == {"upgrade-done": 4}


def job_additions(cluster: SimCluster, since: str) -> list[str]:
    """Nodes of the driver Jobs created after resourceVersion `since` (from the watch history)."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    with client.ApiClient(configuration) as api:
        stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
            client.BatchV1Api(api).list_namespaced_job, NAMESPACE, resource_version=since, timeout_seconds=1
        )
        return [
            e["object"].metadata.annotations["gpuop.dev/node"]
            for e in stream
            if e["type"] == "ADDED"
            and e["object"].metadata.labels.get("gpuop.dev/operation") == "driver-install"
        ]


def test_an_operator_restarted_mid_upgrade_resumes_and_repeats_no_node(cluster: SimCluster, kit: Any) -> None:
    api = cluster.api()
    _, since = api.list(JOBS, NAMESPACE)
    with kit.operator_running(cluster):
        api.patch(DEVICECONFIGS, "gpus", {"spec": driver_spec("6.4", maxParallelUpgrades=1)}, NAMESPACE)
        cluster.wait_for(
            lambda: sum(node_labels(cluster, n).get(VERSION_LABEL) == "6.4" for n in GPU_NODES) >= 2,
            timeout=120,
            what="two nodes upgraded",
        )
    with kit.operator_running(cluster):  # a new operator: nothing in memory carries over
        cluster.wait_for(
            lambda: all(node_labels(cluster, n).get(VERSION_LABEL) == "6.4" for n in GPU_NODES),
            timeout=180,
            what="every node at 6.4",
        )
        cluster.wait_for(
            lambda: all(node_labels(cluster, n).get(STATE_LABEL) == "upgrade-done" for n in GPU_NODES),
            timeout=60,
            what="every node upgrade-done",
        )
    assert sorted(job_additions(cluster, since)) == sorted(GPU_NODES)  # one install Job per node, ever


OVERRIDES = "playbook-overrides"
CONFIGMAPS = Resource("v1", "configmaps", "ConfigMap")
# Bad inputs: one key ends inside an unclosed flow sequence (a YAML error at line 4), a second
# key is not a list of plays.
BROKEN_OVERRIDE = {
    "driver-install.yml": "- hosts: localhost\n  tasks:\n    - name: [unclosed\n",
    "node-reboot.yaml": "hosts: localhost\n",
}
GOOD_OVERRIDE = {"driver-install.yml": "- hosts: localhost\n  tasks: []\n"}


def test_a_broken_playbook_override_holds_every_node_with_a_condition_until_fixed(
    cluster: SimCluster, kit: Any
) -> None:
    api = cluster.api()
    jobs = JobSettings(
        namespace=NAMESPACE, release=kit.release, image=DEFAULT_JOB_IMAGE, overrides_config_map=OVERRIDES
    )
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": OVERRIDES}, "data": BROKEN_OVERRIDE}
    api.create(CONFIGMAPS, body, NAMESPACE)
    _, since = api.list(JOBS, NAMESPACE)

    def node_state(name: str) -> tuple[Any, ...]:
        node = api.get(NODES, name)
        labels = node["metadata"]["labels"]
        return labels.get(VERSION_LABEL), labels.get(STATE_LABEL), node["spec"].get("unschedulable")

    before = {n: node_state(n) for n in GPU_NODES}
    with kit.operator_running(cluster, jobs=jobs):
        api.patch(DEVICECONFIGS, "gpus", {"spec": driver_spec("6.4.1", maxParallelUpgrades=4)}, NAMESPACE)
        dc = cluster.wait_for_object(
            DEVICECONFIGS,
            "gpus",
            NAMESPACE,
            lambda d: any(c.get("reason") == REASON for c in (d.get("status") or {}).get("conditions", [])),
            timeout=60,
        )
        degraded = next(c for c in dc["status"]["conditions"] if c["type"] == "Degraded")
        assert degraded["status"] == "True"
        where = f"ConfigMap {NAMESPACE}/{OVERRIDES} (--driver-playbook-overrides)"
        assert f"{where} key driver-install.yml: not valid YAML at line 4, column 1" in degraded["message"]
        assert "key node-reboot.yaml: a playbook is a non-empty YAML list of plays" in degraded["message"]
        cluster.wait_for_events(
            NAMESPACE,
            lambda events: any(
                e.get("reason") == REASON and "driver-install.yml" in e["message"] for e in events
            ),
            what=f"a {REASON} Event naming driver-install.yml",
        )
        assert job_additions(cluster, since) == []  # held before any Job
        assert {n: node_state(n) for n in GPU_NODES} == before  # no label, state or cordon moved
        api.patch(CONFIGMAPS, OVERRIDES, {"data": {"node-reboot.yaml": None, **GOOD_OVERRIDE}}, NAMESPACE)
        cluster.wait_for(
            lambda: (
                all(node_labels(cluster, n).get(STATE_LABEL) == "upgrade-done" for n in GPU_NODES)
                and all(node_labels(cluster, n).get(VERSION_LABEL) == "6.4.1" for n in GPU_NODES)
            ),
            timeout=180,
            what="every node at 6.4.1 once the override is fixed",
        )
    job = api.get(JOBS, "gpuop-driver-amd-0", NAMESPACE)
    volumes = job["spec"]["template"]["spec"]["volumes"]
    assert [v["configMap"]["name"] for v in volumes if v["name"] == "overrides"] == [OVERRIDES]
    api.delete(CONFIGMAPS, OVERRIDES, NAMESPACE)


def test_a_pdb_that_never_allows_the_eviction_fails_that_node_at_the_drain_timeout(
    cluster: SimCluster, kit: Any
) -> None:
    api = cluster.api()
    labels = {"app": "db"}
    api.create(
        Resource("apps/v1", "deployments", "Deployment"),
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": "amd-2"},
                        "containers": [{"name": "db", "image": "example/db:1"}],
                    },
                },
            },
        },
        "default",
    )
    api.create(
        Resource("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget"),
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": "default"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
        },
        "default",
    )
    cluster.wait_for(
        lambda: [
            p
            for p in api.list(Resource("v1", "pods", "Pod"), "default", labelSelector="app=db")[0]
            if p["status"].get("phase") == "Running"
        ],
        timeout=30,
        what="the db pod running on amd-2",
    )
    with kit.operator_running(cluster):
        api.patch(
            DEVICECONFIGS,
            "gpus",
            {
                "spec": driver_spec(
                    "6.5", maxParallelUpgrades=4, maxUnavailableNodes=4, nodeDrainPolicy={"timeoutSeconds": 3}
                )
            },
            NAMESPACE,
        )
        cluster.wait_for(
            lambda: node_labels(cluster, "amd-2").get(STATE_LABEL) == "upgrade-failed",
            timeout=120,
            what="amd-2 upgrade-failed",
        )
        cluster.wait_for(
            lambda: all(
                node_labels(cluster, n).get(STATE_LABEL) == "upgrade-done" for n in GPU_NODES if n != "amd-2"
            ),
            timeout=120,
            what="the other nodes upgrade-done",
        )
        node = api.get(NODES, "amd-2")
        dc = api.get(DEVICECONFIGS, "gpus", NAMESPACE)
    failure = node["metadata"]["annotations"]["gpuop.dev/driver.failure"]
    assert "drain timed out after 3s" in failure and "default/db-" in failure
    assert node["spec"]["unschedulable"] is True  # left cordoned for a person
    assert dc["status"]["driver"]["nodes"]["amd-2"]["state"] == "upgrade-failed"
    cluster.wait_for_events(
        "default",
        lambda events: any(
            e["reason"] == "DriverUpgradeFailed" and e["involvedObject"]["name"] == "amd-2" for e in events
        ),
        what="DriverUpgradeFailed on amd-2",
    )
    pods = api.list(Resource("v1", "pods", "Pod"), "default", labelSelector="app=db")[0]
    assert [p["spec"]["nodeName"] for p in pods] == ["amd-2"]  # the budget held


def uninstall_spec(policy: str) -> dict[str, Any]:
    return {
        "driver": {
            "enable": False,
            "uninstallPolicy": policy,
            "upgradePolicy": {"rebootRequired": False, "maxParallelUpgrades": 2, "maxUnavailableNodes": 3},
        }
    }


def jobs_of(cluster: SimCluster, operation: str) -> list[str]:
    jobs, _ = cluster.api().list(JOBS, NAMESPACE, labelSelector=f"gpuop.dev/operation={operation}")
    return sorted(j["metadata"]["annotations"]["gpuop.dev/node"] for j in jobs)


def test_enable_false_keeps_the_driver_by_default_and_uninstall_takes_off_only_ours(
    cluster: SimCluster, kit: Any
) -> None:
    api = cluster.api()
    # amd-2 failed its upgrade on a PDB above: give it back; nvidia-0 plays a node whose driver
    # came pre-installed (no version label of ours).
    api.delete(Resource("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget"), "db", "default")
    api.patch(
        NODES,
        "amd-2",
        {"metadata": {"labels": {STATE_LABEL: None}, "annotations": {"gpuop.dev/driver.failure": None}}},
    )
    api.patch(NODES, "nvidia-0", {"metadata": {"labels": {VERSION_LABEL: None, STATE_LABEL: None}}})
    before = {name: node_labels(cluster, name) for name in GPU_NODES}
    with kit.operator_running(cluster):
        dc = api.patch(DEVICECONFIGS, "gpus", {"spec": uninstall_spec("Keep")}, NAMESPACE)
        generation = dc["metadata"]["generation"]
        cluster.wait_for_object(
            DEVICECONFIGS,
            "gpus",
            NAMESPACE,
            lambda d: (d.get("status") or {}).get("observedGeneration") == generation,
            timeout=60,
        )
        assert jobs_of(cluster, "driver-uninstall") == []  # Keep: nothing
        assert all(
            node_labels(cluster, n).get(VERSION_LABEL) == before[n].get(VERSION_LABEL) for n in GPU_NODES
        )
        api.patch(DEVICECONFIGS, "gpus", {"spec": uninstall_spec("Uninstall")}, NAMESPACE)
        ours = ("amd-0", "amd-1", "amd-2")
        cluster.wait_for(
            lambda: all(
                VERSION_LABEL not in (labels := node_labels(cluster, n)) and STATE_LABEL not in labels
                for n in ours
            ),
            timeout=180,
            what="the driver off every node gpuop installed it on",
        )
    assert jobs_of(cluster, "driver-uninstall") == []  # each deleted once done
    assert not api.get(NODES, "amd-0")["spec"].get("unschedulable")  # uncordoned
    assert api.get(NODES, "amd-1")["spec"].get("unschedulable") is True  # the admin's cordon stays
    assert node_labels(cluster, "nvidia-0") == before["nvidia-0"]  # a pre-installed driver: untouched
    for name in ours:
        assert node_labels(cluster, name)[DP] == "true"  # operands resumed
    events = cluster.wait_for_events(
        "default",
        lambda events: (
            {e["involvedObject"]["name"] for e in events if e["reason"] == "DriverUninstalled"} >= set(ours)
        ),
        what="DriverUninstalled on each of our nodes",
    )
    assert [
        (e["reason"], e["message"])
        for e in events
        if "Uninstall" in e["reason"] and e["involvedObject"]["name"] == "nvidia-0"
    ] == []


def test_deleting_a_deviceconfig_with_uninstall_takes_the_driver_off_before_the_finalizer_goes(
    cluster: SimCluster, kit: Any
) -> None:
    api = cluster.api()
    spec = driver_spec("6.6", maxParallelUpgrades=4, maxUnavailableNodes=4)
    spec["driver"]["uninstallPolicy"] = "Uninstall"
    with kit.operator_running(cluster):
        api.patch(DEVICECONFIGS, "gpus", {"spec": spec}, NAMESPACE)
        cluster.wait_for(
            lambda: all(node_labels(cluster, n).get(VERSION_LABEL) == "6.6" for n in GPU_NODES),
            timeout=120,
            what="every node installed again",
        )
        api.delete(DEVICECONFIGS, "gpus", NAMESPACE)
        cluster.wait_for(
            lambda: not api.list(DEVICECONFIGS, NAMESPACE)[0], timeout=180, what="the DeviceConfig gone"
        )
    # Had the finalizer gone first, no operator pass would have uninstalled anything.
    for name in GPU_NODES:
        labels = node_labels(cluster, name)
        assert VERSION_LABEL not in labels and STATE_LABEL not in labels, name
        assert not any(k.startswith("gpuop.dev/deploy.") for k in labels), name
