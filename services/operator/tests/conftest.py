"""Fixtures for reconciler tests: a stub-pod SimCluster with the operand DaemonSets and ConfigMaps a
Helm install of the umbrella chart would create, and an in-process operator driving it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
from gpuop_common.kube import EventRecorder
from gpuop_operator.crd import device_config_crd
from gpuop_operator.driverjob import JobSettings
from gpuop_operator.kubeio import KubeJson
from gpuop_operator.reconciler import Reconciler, ReconcilerSettings
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, DAEMONSETS, NAMESPACES, KubeRest, Resource
from kubernetes import client, config

NAMESPACE = "gpu-operator"
RELEASE = "gpuop"
SERVICES = ("device-plugin", "node-labeller", "metrics-exporter")
CRDS = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False)
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")


def operand_daemonset(service: str) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": service, "app.kubernetes.io/instance": RELEASE}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": f"{RELEASE}-{service}", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {f"gpuop.dev/deploy.{service}": "true"},
                    "containers": [{"name": service, "image": f"gpuop/gpuop-{service}:0.1.0"}],
                },
            },
        },
    }


def config_map(service: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{RELEASE}-{service}-config",
            "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/name": service, "app.kubernetes.io/instance": RELEASE},
        },
        "data": {"config.yaml": "{}\n"},
    }


def install_operands(rest: KubeRest, services: tuple[str, ...] = SERVICES) -> None:
    """What `helm install` of the umbrella chart would leave: namespace, CRD, DaemonSets, ConfigMaps."""
    rest.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    rest.create(CRDS, device_config_crd())
    for service in services:
        rest.create(DAEMONSETS, operand_daemonset(service), NAMESPACE)
        rest.create(CONFIGMAPS, config_map(service), NAMESPACE)


def device_config(name: str = "gpus", spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "gpuop.dev/v1alpha1",
        "kind": "DeviceConfig",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec or {},
    }


@dataclass
class RunningOperator:
    reconciler: Reconciler
    thread: threading.Thread
    stop_event: threading.Event
    api: client.ApiClient

    def stop(self) -> None:
        self.stop_event.set()
        if self.thread.ident is not None:
            self.thread.join(timeout=15)
        self.reconciler.stop()
        self.api.close()


def api_client_for(cluster: SimCluster, pool: int = 16) -> client.ApiClient:
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    configuration.connection_pool_maxsize = pool
    return client.ApiClient(configuration)


def start_operator(
    cluster: SimCluster,
    *,
    loop: bool = True,
    timeout: float = 10.0,
    leading: bool = True,
    resync_interval: float = 5.0,
    jobs: JobSettings | None = None,
) -> RunningOperator:
    api = api_client_for(cluster)
    reconciler = Reconciler(
        KubeJson(api, timeout=timeout),
        ReconcilerSettings(
            namespace=NAMESPACE, release=RELEASE, resync_interval=resync_interval, max_backoff=1.0, jobs=jobs
        ),
        events=EventRecorder(api, component="gpuop-operator", host="test"),
    )
    reconciler.start_watches()
    assert reconciler.wait_synced(20)
    if leading:
        reconciler.leading.set()
    stop_event = threading.Event()

    def stopping(timeout: float) -> bool:
        return stop_event.wait(timeout)

    thread = threading.Thread(target=reconciler.run, args=(stopping,), daemon=True)
    if loop:
        thread.start()
    return RunningOperator(reconciler, thread, stop_event, api)


@contextmanager
def operator_running(cluster: SimCluster, **kwargs: Any) -> Iterator[RunningOperator]:
    running = start_operator(cluster, **kwargs)
    try:
        yield running
    finally:
        running.stop()


class OperatorKit:
    """The helpers above, handed to tests as the `kit` fixture (test modules cannot import conftest)."""

    namespace = NAMESPACE
    release = RELEASE
    deviceconfigs = DEVICECONFIGS
    device_config = staticmethod(device_config)
    install_operands = staticmethod(install_operands)
    operand_daemonset = staticmethod(operand_daemonset)
    start_operator = staticmethod(start_operator)
    operator_running = staticmethod(operator_running)
    api_client_for = staticmethod(api_client_for)


@pytest.fixture(scope="session")
def kit() -> OperatorKit:
    return OperatorKit()


@pytest.fixture
def stub_cluster() -> Iterator[SimCluster]:
    with SimCluster(amd_nodes=3, nvidia_nodes=2, pods="stub") as cluster:
        install_operands(cluster.api())
        yield cluster
