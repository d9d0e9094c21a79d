"""What a process-mode container gets of a pod's in-cluster API access: the Service variables, the
pod's own ServiceAccount token and the cluster CA from its projected volume, behind an absolute
kubeconfig path; and a projected volume the kubelet cannot set up is a FailedMount, never silence."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, PODS, KubeRest

NS = "default"
ENV_DUMP = "import json, os, sys, time; print(json.dumps(dict(os.environ)), flush=True); time.sleep(300)"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SimCluster]:
    commands = {"test/env-dump": [sys.executable, "-c", ENV_DUMP]}
    with SimCluster(profiles=["cpu-only"], pods="process", image_commands=commands) as sim:
        yield sim


def pod(name: str, **spec: Any) -> dict[str, Any]:
    containers = [{"name": "c", "image": "test/env-dump:1"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": containers, **spec},
    }


def test_a_container_reaches_the_api_server_as_its_service_account(cluster: SimCluster) -> None:
    api: KubeRest = cluster.api()
    api.create(PODS, pod("dump"), NS)
    cluster.wait_for_object(PODS, "dump", NS, lambda p: p["status"].get("phase") == "Running")
    line = cluster.wait_for(lambda: cluster.pod_log(NS, "dump", "c").strip(), what="the env dump")
    env = json.loads(line.splitlines()[0])

    server = urlsplit(cluster.url)
    assert (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]) == (
        server.hostname,
        str(server.port),
    )
    kubeconfig = Path(env["KUBECONFIG"])
    assert kubeconfig.is_absolute() and env["GPUOP_KUBECONFIG"] == str(kubeconfig)
    config = yaml.safe_load(kubeconfig.read_text())
    assert config["clusters"][0]["cluster"]["server"] == cluster.url
    token_file = Path(config["users"][0]["user"]["tokenFile"])
    token = token_file.read_text()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())["users"][0]["user"]["token"]
    assert token and token != admin
    assert "system:serviceaccount:default:default" in token  # the pod's own ServiceAccount
    root_ca = api.get(CONFIGMAPS, "kube-root-ca.crt", NS)["data"]["ca.crt"]
    assert (token_file.parent / "ca.crt").read_text() == root_ca
    assert (token_file.parent / "namespace").read_text() == NS


def test_a_projected_volume_that_cannot_be_set_up_is_a_failed_mount(cluster: SimCluster) -> None:
    api: KubeRest = cluster.api()
    volume = {"name": "extra", "projected": {"sources": [{"configMap": {"name": "absent"}}]}}
    body = pod("no-mount", volumes=[volume])
    body["spec"]["containers"][0]["volumeMounts"] = [{"name": "extra", "mountPath": "/etc/extra"}]
    api.create(PODS, body, NS)

    def failed_mount(events: list[dict[str, Any]]) -> bool:
        return any(
            e.get("reason") == "FailedMount" and e["involvedObject"]["name"] == "no-mount" for e in events
        )

    events = cluster.wait_for_events(NS, failed_mount, what="FailedMount")
    event = next(e for e in events if e.get("reason") == "FailedMount")
    assert event["message"] == 'MountVolume.SetUp failed for volume "extra" : configmap "absent" not found'
    waiting = cluster.wait_for_object(
        PODS,
        "no-mount",
        NS,
        lambda p: (p["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("waiting"),
    )
    assert waiting["status"]["phase"] == "Pending"
    assert waiting["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ContainerCreating"
