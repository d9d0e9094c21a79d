"""End to end with the real helm: install the umbrella chart into a process-mode simulated cluster,
upgrade it (the CRD pre-upgrade hook Job runs and the current CRD is served again), roll back, and
uninstall (the pre-delete hook cleans up: no DeviceConfigs, release Secrets, or gpuop node labels).

The tests run in file order and share one release, as a user's session would.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuop_common.kubejson import CONFIGMAPS, JOBS, NODES, PODS, SECRETS, KubeJson
from gpuop_operator.crd import CRD_NAME, device_config_crd
from gpuop_sim import helm
from gpuop_sim.cluster import PROFILE_LABEL, SimCluster
from gpuop_sim.workloads.kubeapi import Resource
from kubernetes import client, config

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
UMBRELLA = ROOT / "charts" / "gpu-operator"
NAMESPACE = "gpu-operator"
RELEASE = "gpuop"
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
CRDS = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False)


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    helm.dependency_build(UMBRELLA)
    with SimCluster(amd_nodes=1, nvidia_nodes=1, cpu_nodes=1) as sim:
        yield sim


def run_helm(cluster: SimCluster, *args: str) -> str:
    result = helm.run_helm([*args, "--kubeconfig", str(cluster.kubeconfig)])
    assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr}"
    return result.stdout


def ready(cluster: SimCluster) -> bool:
    dcs, _ = cluster.api().list(DEVICECONFIGS, NAMESPACE)
    return len(dcs) == 2 and all(
        any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (dc.get("status") or {}).get("conditions", [])
        )
        for dc in dcs
    )


def describe_pods(pods: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """What a person needs to see why a pod outlived its owner."""
    return [
        (
            pod["metadata"]["name"],
            [ref["kind"] + "/" + ref["name"] for ref in pod["metadata"].get("ownerReferences") or []],
            pod["metadata"].get("deletionTimestamp"),
            (pod.get("status") or {}).get("phase"),
            (pod.get("spec") or {}).get("nodeName"),
        )
        for pod in pods
    ]


def exporter_port(cluster: SimCluster, vendor: str) -> int:
    data = cluster.api().get(CONFIGMAPS, f"{RELEASE}-metrics-exporter-config", NAMESPACE)["data"]
    return int(yaml.safe_load(data[f"{NAMESPACE}.{vendor}.yaml"])["port"])


class JobWatcher:
    """Every watch event of the release namespace's Jobs, from a background thread."""

    def __init__(self, cluster: SimCluster) -> None:
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        self.api = client.ApiClient(configuration)
        self.kube = KubeJson(self.api)
        self.events: list[dict[str, Any]] = []
        self.response: Any = None
        _, rv = self.kube.list(JOBS, NAMESPACE)
        self.thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self.thread.start()

    def _run(self, rv: str) -> None:
        def opened(response: Any) -> None:
            self.response = response

        try:
            for event in self.kube.watch(JOBS, NAMESPACE, rv, 300, on_open=opened):
                self.events.append(event)
        except Exception:  # the stream is shut down from stop()
            return

    def completed(self, name: str) -> bool:
        return any(
            e["object"]["metadata"]["name"] == name
            and any(
                c["type"] == "Complete" and c["status"] == "True"
                for c in (e["object"].get("status") or {}).get("conditions") or []
            )
            for e in self.events
            if e.get("type") in ("ADDED", "MODIFIED")
        )

    def stop(self) -> None:
        if self.response is not None:
            self.response.shutdown()
        self.thread.join(timeout=10)
        self.api.close()


def test_install_waits_for_every_workload_and_rolls_out(cluster: SimCluster) -> None:
    out = run_helm(
        cluster,
        "install",
        RELEASE,
        str(UMBRELLA),
        "-n",
        NAMESPACE,
        "--create-namespace",
        "--wait",
        "--timeout",
        "5m",
    )
    assert "STATUS: deployed" in out
    cluster.wait_for(lambda: ready(cluster), timeout=240, what="both DeviceConfigs Ready")
    releases = json.loads(run_helm(cluster, "list", "-n", NAMESPACE, "-o", "json"))
    assert [(r["name"], r["revision"], r["status"]) for r in releases] == [(RELEASE, "1", "deployed")]
    # Release storage: one Secret per revision, written as protobuf by helm.
    secrets, _ = cluster.api().list(SECRETS, NAMESPACE, labelSelector=f"owner=helm,name={RELEASE}")
    assert [s["metadata"]["name"] for s in secrets] == [f"sh.helm.release.v1.{RELEASE}.v1"]


def test_upgrade_runs_the_crd_hook_and_changes_a_deviceconfig(cluster: SimCluster, tmp_path: Path) -> None:
    api = cluster.api()
    # A cluster installed with an older chart: the served CRD lacks a field's description.
    stale = api.get(CRDS, CRD_NAME)
    driver = stale["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "driver"
    ]
    driver.pop("description")
    api.replace(CRDS, CRD_NAME, stale)
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "deviceConfigs": [
                    {
                        "name": "amd",
                        "spec": {
                            "vendor": "amd",
                            "selector": {
                                "matchLabels": {"feature.node.kubernetes.io/pci-1002.present": "true"}
                            },
                            "metricsExporter": {"port": 5001},
                        },
                    },
                    {
                        "name": "nvidia",
                        "spec": {
                            "vendor": "nvidia",
                            "selector": {
                                "matchLabels": {"feature.node.kubernetes.io/pci-10de.present": "true"}
                            },
                        },
                    },
                ]
            }
        )
    )
    watcher = JobWatcher(cluster)
    try:
        run_helm(
            cluster,
            "upgrade",
            RELEASE,
            str(UMBRELLA),
            "-n",
            NAMESPACE,
            "-f",
            str(values),
            "--wait",
            "--timeout",
            "5m",
        )
        assert watcher.completed(f"{RELEASE}-crds-crd-upgrade"), [
            (e["type"], e["object"]["metadata"]["name"]) for e in watcher.events
        ]
    finally:
        watcher.stop()
    served = api.get(CRDS, CRD_NAME)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    wanted = device_config_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert (
        served["properties"]["spec"]["properties"]["driver"]["description"]
        == (wanted["properties"]["spec"]["properties"]["driver"]["description"])
    )
    cluster.wait_for(lambda: exporter_port(cluster, "amd") == 5001, timeout=120, what="port 5001 projected")
    assert json.loads(run_helm(cluster, "get", "values", RELEASE, "-n", NAMESPACE, "-o", "json"))[
        "deviceConfigs"
    ][0]["spec"]["metricsExporter"] == {"port": 5001}


def test_rollback_restores_the_first_revision(cluster: SimCluster) -> None:
    run_helm(cluster, "rollback", RELEASE, "1", "-n", NAMESPACE, "--wait", "--timeout", "5m")
    cluster.wait_for(lambda: exporter_port(cluster, "amd") == 5000, timeout=120, what="port back to 5000")
    assert "REVISION: 3" in run_helm(cluster, "status", RELEASE, "-n", NAMESPACE)


def test_uninstall_leaves_no_gpuop_objects_secrets_or_node_labels(cluster: SimCluster) -> None:
    run_helm(cluster, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "5m")
    api = cluster.api()
    assert api.list(DEVICECONFIGS, NAMESPACE)[0] == []
    assert api.list(SECRETS, NAMESPACE, labelSelector="owner=helm")[0] == []
    try:
        cluster.wait_for(lambda: not api.list(PODS, NAMESPACE)[0], timeout=120, what="every release pod gone")
    except Exception as error:
        raise AssertionError(
            f"{error}; still there: {describe_pods(api.list(PODS, NAMESPACE)[0])}"
        ) from error
    for node in api.list(NODES)[0]:
        meta = node["metadata"]
        ours = [
            k
            for k in meta["labels"]
            if k.startswith(("gpuop.dev/", "amd.com/", "beta.amd.com/", "nvidia.com/")) and k != PROFILE_LABEL
        ]
        assert ours == [], meta["name"]
        assert not [k for k in meta.get("annotations") or {} if k.startswith("gpuop.dev/")], meta["name"]
