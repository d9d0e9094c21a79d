"""The reconciler against the simulated cluster: rollout to Ready, projection, events, cleanup."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, DAEMONSETS, NODES, Resource

NAMESPACE = "gpu-operator"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")

DEPLOY = (
    "gpuop.dev/deploy.device-plugin",
    "gpuop.dev/deploy.node-labeller",
    "gpuop.dev/deploy.metrics-exporter",
)


def gpuop_labels(cluster: SimCluster) -> dict[str, dict[str, str]]:
    nodes, _ = cluster.api().list(NODES)
    return {
        n["metadata"]["name"]: {
            k: v for k, v in n["metadata"]["labels"].items() if k.startswith("gpuop.dev/deploy.")
        }
        for n in nodes
    }


def condition(dc: dict[str, Any], kind: str) -> dict[str, Any]:
    for cond in (dc.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return dict(cond)
    return {}


def wait_ready(cluster: SimCluster, name: str = "gpus", timeout: float = 60) -> dict[str, Any]:
    return cluster.wait_for_object(
        DEVICECONFIGS,
        name,
        NAMESPACE,
        lambda dc: (
            condition(dc, "Ready").get("status") == "True"
            and dc["status"].get("observedGeneration") == dc["metadata"]["generation"]
        ),
        timeout=timeout,
    )


@pytest.mark.slow
def test_rollout_reaches_ready_with_labels_configmaps_status_and_events(
    stub_cluster: SimCluster, kit: Any
) -> None:
    api = stub_cluster.api()
    with kit.operator_running(stub_cluster):
        api.create(DEVICECONFIGS, kit.device_config(spec={"metricsExporter": {"port": 5001}}), NAMESPACE)
        dc = wait_ready(stub_cluster)
    assert all(labels == dict.fromkeys(DEPLOY, "true") for labels in gpuop_labels(stub_cluster).values())
    status = dc["status"]
    assert status["selectedNodes"] == status["readyNodes"] == 5
    assert status["operands"]["metricsExporter"] == {"desired": 5, "ready": 5}
    assert set(status["nodes"].values()) == {"ready"}
    assert condition(dc, "Progressing")["status"] == "False"
    assert condition(dc, "Degraded")["status"] == "False"
    assert "gpuop.dev/node-cleanup" in dc["metadata"]["finalizers"]
    node = api.get(NODES, "amd-0")
    assert node["metadata"]["annotations"]["gpuop.dev/deviceconfig"] == f"{NAMESPACE}/gpus"
    assert node["metadata"]["annotations"]["gpuop.dev/stage"] == "ready"
    cm = api.get(CONFIGMAPS, "gpuop-metrics-exporter-config", NAMESPACE)
    assert yaml.safe_load(cm["data"]["config.yaml"])["port"] == 5001
    assert yaml.safe_load(cm["data"][f"{NAMESPACE}.gpus.yaml"])["port"] == 5001
    stub_cluster.wait_for_events(
        NAMESPACE,
        lambda events: any(
            e["reason"] == "RolloutComplete" and e["involvedObject"]["kind"] == "DeviceConfig" for e in events
        ),
        what="a RolloutComplete Event on the DeviceConfig",
    )


@pytest.mark.slow
def test_invalid_spec_sets_a_condition_and_changes_nothing_on_nodes(
    stub_cluster: SimCluster, kit: Any
) -> None:
    api = stub_cluster.api()
    with kit.operator_running(stub_cluster):
        unsupported = {"driver": {"enable": True, "driverType": "pf-passthrough"}}
        api.create(DEVICECONFIGS, kit.device_config(spec=unsupported), NAMESPACE)
        dc = stub_cluster.wait_for_object(
            DEVICECONFIGS, "gpus", NAMESPACE, lambda d: condition(d, "Ready").get("reason") == "Unsupported"
        )
        assert condition(dc, "Ready")["status"] == "False"
        assert "spec.driver.driverType" in condition(dc, "Ready")["message"]
        assert all(not labels for labels in gpuop_labels(stub_cluster).values())
        events = stub_cluster.wait_for_events(
            NAMESPACE,
            lambda events: any(e["reason"] == "Unsupported" for e in events),
            what="an Unsupported Event",
        )
        assert {e["type"] for e in events if e["reason"] == "Unsupported"} == {"Warning"}
        # Fixing the spec rolls out.
        api.patch(
            DEVICECONFIGS, "gpus", {"spec": {"driver": {"enable": False, "driverType": None}}}, NAMESPACE
        )
        wait_ready(stub_cluster)


@pytest.mark.slow
def test_second_deviceconfig_over_the_same_nodes_is_in_conflict(stub_cluster: SimCluster, kit: Any) -> None:
    api = stub_cluster.api()
    with kit.operator_running(stub_cluster):
        api.create(DEVICECONFIGS, kit.device_config("first"), NAMESPACE)
        wait_ready(stub_cluster, "first")
        amd_only = {"selector": {"matchLabels": {"feature.node.kubernetes.io/pci-1002.present": "true"}}}
        api.create(DEVICECONFIGS, kit.device_config("second", amd_only), NAMESPACE)
        dc = stub_cluster.wait_for_object(
            DEVICECONFIGS, "second", NAMESPACE, lambda d: condition(d, "Ready").get("reason") == "Conflict"
        )
        assert "spec.selector" in condition(dc, "Ready")["message"]
        assert f"{NAMESPACE}/first" in condition(dc, "Ready")["message"]
        node = api.get(NODES, "amd-0")
        assert node["metadata"]["annotations"]["gpuop.dev/deviceconfig"] == f"{NAMESPACE}/first"


@pytest.mark.slow
def test_disable_then_delete_removes_labels_keys_and_the_finalizer(
    stub_cluster: SimCluster, kit: Any
) -> None:
    api = stub_cluster.api()
    with kit.operator_running(stub_cluster):
        api.create(DEVICECONFIGS, kit.device_config(), NAMESPACE)
        wait_ready(stub_cluster)
        api.patch(DEVICECONFIGS, "gpus", {"spec": {"metricsExporter": {"enable": False}}}, NAMESPACE)
        stub_cluster.wait_for(
            lambda: all(DEPLOY[2] not in labels for labels in gpuop_labels(stub_cluster).values()),
            what="exporter labels gone",
        )
        wait_ready(stub_cluster)
        api.delete(DEVICECONFIGS, "gpus", NAMESPACE)
        stub_cluster.wait_for(
            lambda: not api.list(DEVICECONFIGS, NAMESPACE)[0], timeout=60, what="DeviceConfig deleted"
        )
    assert all(not labels for labels in gpuop_labels(stub_cluster).values())
    nodes, _ = api.list(NODES)
    assert all("gpuop.dev/deviceconfig" not in (n["metadata"].get("annotations") or {}) for n in nodes)
    cm = api.get(CONFIGMAPS, "gpuop-device-plugin-config", NAMESPACE)
    assert f"{NAMESPACE}.gpus.yaml" not in cm["data"]


@pytest.mark.slow
def test_nodes_leaving_the_selector_are_cleaned_up(stub_cluster: SimCluster, kit: Any) -> None:
    api = stub_cluster.api()
    with kit.operator_running(stub_cluster):
        api.create(
            DEVICECONFIGS, kit.device_config(spec={"selector": {"matchLabels": {"pool": "gpu"}}}), NAMESPACE
        )
        for name in ("amd-0", "amd-1"):
            api.patch(NODES, name, {"metadata": {"labels": {"pool": "gpu"}}})
        stub_cluster.wait_for(
            lambda: gpuop_labels(stub_cluster)["amd-1"] == dict.fromkeys(DEPLOY, "true"),
            what="amd-1 rolled out",
        )
        wait_ready(stub_cluster)
        api.patch(NODES, "amd-1", {"metadata": {"labels": {"pool": None}}})
        stub_cluster.wait_for(lambda: not gpuop_labels(stub_cluster)["amd-1"], what="amd-1 cleaned up")
        # Count-only status changes are written at most once a second: wait for the one asserted.
        dc = stub_cluster.wait_for_object(
            DEVICECONFIGS, "gpus", NAMESPACE, lambda d: "amd-1" not in d["status"]["nodes"], timeout=10
        )
    assert gpuop_labels(stub_cluster)["amd-0"] == dict.fromkeys(DEPLOY, "true")
    assert dc["status"]["selectedNodes"] == 1
    assert "amd-1" not in dc["status"]["nodes"]


@pytest.mark.slow
def test_a_profiles_config_map_that_is_missing_or_malformed_degrades_the_deviceconfig_naming_the_field(
    stub_cluster: SimCluster, kit: Any
) -> None:
    """Bad inputs: the named ConfigMap missing, then a profile with computePartition XPX; fixed, its
    profiles reach the config manager's key between the DeviceConfig's and the shipped ones."""
    api = stub_cluster.api()
    name = f"{kit.release}-config-manager-config"
    shipped = "- {name: cpx-nps1, amd: {computePartition: CPX}}\n- {name: spx-nps1, amd: {}}\n"
    api.create(DAEMONSETS, kit.operand_daemonset("config-manager"), NAMESPACE)
    ours = {"name": name, "labels": {"app.kubernetes.io/instance": kit.release}}
    data = {"config.yaml": "{}\n", "shipped-profiles.yaml": shipped}
    api.create(
        CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": ours, "data": data}, NAMESPACE
    )
    field = "spec.configManager.profilesConfigMap: ConfigMap gpu-operator/site-profiles"

    def degraded(message: str) -> dict[str, Any]:
        return stub_cluster.wait_for_object(
            DEVICECONFIGS,
            "gpus",
            NAMESPACE,
            lambda d: condition(d, "Degraded").get("message", "").startswith(message),
        )

    spec = {"configManager": {"enable": True, "profilesConfigMap": "site-profiles"}}
    with kit.operator_running(stub_cluster):
        api.create(DEVICECONFIGS, kit.device_config(spec=spec), NAMESPACE)
        dc = degraded(f"{field} not found")
        assert condition(dc, "Degraded")["reason"] == "ProfilesConfigMapInvalid"
        stub_cluster.wait_for_events(
            NAMESPACE,
            lambda events: any(
                e["reason"] == "ProfilesConfigMapInvalid" and e["type"] == "Warning" and field in e["message"]
                for e in events
            ),
            what="a ProfilesConfigMapInvalid Warning Event",
        )
        assert f"{NAMESPACE}.gpus.yaml" not in api.get(CONFIGMAPS, name, NAMESPACE)["data"]
        site = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "site-profiles"}}
        bad = "- {name: cpx-nps1, amd: {computePartition: XPX}}\n"
        api.create(CONFIGMAPS, {**site, "data": {"profiles.yaml": bad}}, NAMESPACE)
        degraded(f"{field} key profiles.yaml[0].amd.computePartition: Input should be")
        good = "- {name: cpx-nps1, amd: {computePartition: DPX, memoryPartition: NPS2}}\n"
        good += "- {name: site, amd: {}}\n"
        api.patch(CONFIGMAPS, "site-profiles", {"data": {"profiles.yaml": good}}, NAMESPACE)
        stub_cluster.wait_for_object(
            DEVICECONFIGS, "gpus", NAMESPACE, lambda d: condition(d, "Degraded").get("status") == "False"
        )
        projected = stub_cluster.wait_for_object(
            CONFIGMAPS, name, NAMESPACE, lambda cm: f"{NAMESPACE}.gpus.yaml" in cm["data"]
        )
    profiles = yaml.safe_load(projected["data"][f"{NAMESPACE}.gpus.yaml"])["profiles"]
    assert [(p["name"], p["amd"]["computePartition"]) for p in profiles] == [
        ("cpx-nps1", "DPX"),
        ("site", "SPX"),
        ("spx-nps1", "SPX"),
    ]
    assert projected["data"]["shipped-profiles.yaml"] == shipped  # the chart's key, only read
