"""Fixtures for reconciler tests: a stub-pod SimCluster with the operand DaemonSets and ConfigMaps a
Helm install of the umbrella chart would create, and an in-process operator driving it; and for the
driver planners' tests, `DriverWorld`, which applies each plan the way the reconciler and the
cluster would: node patches, Jobs that run for a few passes and then succeed (or fail where a test
says so), evictions that a PDB may refuse, reboots that change the bootID."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from gpuop_common.config.driver import DriverConfig
from gpuop_common.kube import EventRecorder
from gpuop_operator.crd import device_config_crd
from gpuop_operator.drain import NodePod
from gpuop_operator.driverflow import (
    PAUSE_VALUE,
    TEST_REQUEST,
    TEST_RESULT,
    VERSION_LABEL,
    DriverPlan,
    FailedRun,
    plan_driver,
)
from gpuop_operator.driverjob import JobSettings, JobView
from gpuop_operator.driveruninstall import plan_uninstall
from gpuop_operator.kubeio import KubeJson
from gpuop_operator.model import AMD_PRESENT, NodeInfo, deploy_label
from gpuop_operator.reconciler import Reconciler, ReconcilerSettings
from gpuop_operator.upgrade import STATE_LABEL
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, DAEMONSETS, NAMESPACES, PODS, KubeRest, Resource
from kubernetes import client, config

NAMESPACE = "gpu-operator"
RELEASE = "gpuop"
SERVICES = ("device-plugin", "node-labeller", "metrics-exporter")
CRDS = Resource("apiextensions.k8s.io/v1", "customresourcedefinitions", "CustomResourceDefinition", False)
DEVICECONFIGS = Resource("gpuop.dev/v1alpha1", "deviceconfigs", "DeviceConfig")
DP = deploy_label("device-plugin")


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
                    # The charts' default: operands come back to a node remediation tainted.
                    "tolerations": [{"key": "gpuop.dev/gpu-unhealthy", "operator": "Exists"}],
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


def operator_deployment(node: str) -> dict[str, Any]:
    """The chart's operator Deployment (its pod labels), pinned to `node` as on a one-node cluster."""
    labels = {"app.kubernetes.io/name": "operator", "app.kubernetes.io/instance": RELEASE}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "gpuop-operator", "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "containers": [{"name": "operator", "image": "gpuop/gpuop-operator:0.1.0"}],
                },
            },
        },
    }


def operator_pods(cluster: SimCluster) -> list[str]:
    pods, _ = cluster.api().list(PODS, NAMESPACE, labelSelector="app.kubernetes.io/name=operator")
    return sorted(p["metadata"]["uid"] for p in pods if "deletionTimestamp" not in p["metadata"])


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
    operator_deployment = staticmethod(operator_deployment)
    operator_pods = staticmethod(operator_pods)


# ---- the driver planners (driverflow, driveruninstall) against a small model of a cluster ----
def driver(version: str = "6.2", **policy: object) -> DriverConfig:
    return DriverConfig.model_validate({"enable": True, "version": version, "upgradePolicy": policy})


def gpu_node(name: str, **labels: str) -> NodeInfo:
    return NodeInfo(name, {AMD_PRESENT: "true", **labels}, {}, boot_id=f"{name}-boot-0", gpus_allocatable=8)


@dataclass
class DriverWorld:
    nodes: dict[str, NodeInfo]
    job_passes: int = 2  # passes a Job runs before it finishes
    fail_jobs_on: set[str] = field(default_factory=set)
    pdb_blocks: set[str] = field(default_factory=set)  # pods whose eviction a PDB refuses
    pods: dict[str, list[NodePod]] = field(default_factory=dict)
    jobs: dict[tuple[str, str], JobView] = field(default_factory=dict)
    ages: dict[tuple[str, str], int] = field(default_factory=dict)
    operand_pods: set[tuple[str, str]] = field(default_factory=set)
    failed_runs: dict[str, FailedRun] = field(default_factory=dict)
    now: float = 1_000_000.0
    events: list[tuple[str, str, str]] = field(default_factory=list)
    created: list[tuple[str, str]] = field(default_factory=list)
    reboots: int = 0
    validation_recipe: str | None = None
    failing_validation: set[str] = field(default_factory=set)
    answered: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    durations: list[float] = field(default_factory=list)
    allocatable_expected: bool = True  # a device plugin advertises the GPUs
    advertises: bool = True  # False: its GPUs never reach allocatable (nothing registers them)
    uninstall: bool = False  # the driver is to come off (enable false / deletion, policy Uninstall)
    operator_image: str = "ghcr.io/gpuop/gpuop-operator:0.1.0"  # a Job's image without spec.driver.image
    unpullable: set[str] = field(default_factory=set)  # images no node can pull: the Job's pod stays Pending

    def step(self, config: DriverConfig, seconds: float = 10.0) -> DriverPlan:
        self.now += seconds
        self._advance_jobs()
        plan = (plan_uninstall if self.uninstall else plan_driver)(
            config,
            list(self.nodes.values()),
            dict(self.jobs),
            node_pods=self.pods,
            operand_pods=frozenset(self.operand_pods),
            failed_runs=self.failed_runs,
            now=self.now,
            job_deadline_s=600,
            validation_recipe=self.validation_recipe,
            validation_timeout_s=300,
            allocatable_expected=self.allocatable_expected,
            job_image=config.image or self.operator_image,
        )
        for patch in [*plan.patches, *plan.start_patches]:
            node = self.nodes[patch.node]
            labels = {**node.labels, **patch.labels}
            annotations = {**node.annotations, **patch.annotations}
            unschedulable = node.unschedulable if patch.unschedulable is None else patch.unschedulable
            self.nodes[patch.node] = dataclasses.replace(
                node,
                labels={k: v for k, v in labels.items() if v is not None},
                annotations={k: v for k, v in annotations.items() if v is not None},
                unschedulable=unschedulable,
            )
        for job in plan.delete_jobs:
            self.jobs.pop((job.node, job.operation), None)
        for node, operation, _vendor, version in plan.create_jobs:
            name = f"{operation}-{node}-{len(self.created)}"
            self.created.append((node, operation))
            image = config.image or self.operator_image
            pull = (
                ("ImagePullBackOff", f'Back-off pulling image "{image}"')
                if image in self.unpullable
                else ("", "")
            )
            self.jobs[(node, operation)] = JobView(
                name,
                f"uid-{name}",
                node,
                operation,
                version,
                "running",
                image=image,
                pull_reason=pull[0],
                pull_message=pull[1],
            )
            self.ages[(node, operation)] = 0
        for pod in plan.evict + plan.delete_pods:
            if pod.name not in self.pdb_blocks:
                self.pods[self._node_of(pod)].remove(pod)
        # Paused operands' pods go away; resumed ones come back.
        for name, node in self.nodes.items():
            for label, value in node.labels.items():
                service = label.removeprefix("gpuop.dev/deploy.")
                if value == PAUSE_VALUE:
                    self.operand_pods.discard((name, service))
                elif value == "true" and label.startswith("gpuop.dev/deploy."):
                    self.operand_pods.add((name, service))
        # The kubelet: a stopped device plugin's devices leave allocatable at once; its pod back,
        # they return (the re-registration, one pass later for the planner).
        for name, node in self.nodes.items():
            if node.labels.get(DP) == PAUSE_VALUE and node.gpus_allocatable:
                self.nodes[name] = dataclasses.replace(node, gpus_allocatable=0)
            elif (
                self.advertises and (name, "device-plugin") in self.operand_pods and not node.gpus_allocatable
            ):
                self.nodes[name] = dataclasses.replace(node, gpus_allocatable=8)
        self.events += [(e.node, e.reason, e.message) for e in plan.events]
        self.finished += [node for node, _ in plan.finished]
        self.durations += [seconds for _, seconds in plan.finished]
        self._answer_test_requests()
        return plan

    def _answer_test_requests(self) -> None:
        """The nodes' test runners: answer a request and clear it (docs/test-runner.md)."""
        for name, node in self.nodes.items():
            request = node.annotations.get(TEST_REQUEST)
            if not request or (name, "test-runner") not in self.operand_pods:
                continue
            recipe, _, request_id = request.partition(":")
            result = "Failed" if name in self.failing_validation else "Passed"
            answer = json.dumps(
                {"requestId": request_id, "recipe": recipe, "result": result, "reason": "gpu 0: ECC"}
            )
            annotations = {k: v for k, v in node.annotations.items() if k != TEST_REQUEST}
            self.nodes[name] = dataclasses.replace(node, annotations={**annotations, TEST_RESULT: answer})
            self.answered.append(name)

    def _node_of(self, pod: NodePod) -> str:
        return next(node for node, pods in self.pods.items() if pod in pods)

    def _advance_jobs(self) -> None:
        for key, job in list(self.jobs.items()):
            if job.phase != "running" or job.pulling:  # a kubelet never fails a pod for its image
                continue
            self.ages[key] += 1
            if self.ages[key] < self.job_passes:
                continue
            node, operation = key
            if operation == "node-reboot":
                self.nodes[node] = dataclasses.replace(
                    self.nodes[node], boot_id=f"{node}-boot-{self.reboots + 1}"
                )
                self.reboots += 1
                self.jobs[key] = dataclasses.replace(
                    job, phase="failed", reason="PodFailed"
                )  # died with the host
            elif node in self.fail_jobs_on:
                self.jobs[key] = dataclasses.replace(job, phase="failed", reason="BackoffLimitExceeded")
                self.failed_runs[job.uid] = FailedRun(
                    "task 'Build amdgpu-dkms': dkms build failed",
                    (("Build amdgpu-dkms", "make: *** Error 2"),),
                )
            else:
                self.jobs[key] = dataclasses.replace(job, phase="succeeded")

    def states(self) -> dict[str, str | None]:
        return {name: node.labels.get(STATE_LABEL) for name, node in self.nodes.items()}


def installed_world(n: int = 3, **kwargs: object) -> DriverWorld:
    """`n` nodes with the driver installed by gpuop, operands running, plus one with a pre-installed
    driver (no version label of ours)."""
    nodes = {f"n{i}": gpu_node(f"n{i}", **{VERSION_LABEL: "6.2", DP: "true"}) for i in range(n)}
    # A state label of an old walk but no version label of ours: still not ours to touch.
    nodes["own-driver"] = gpu_node("own-driver", **{DP: "true", STATE_LABEL: "upgrade-done"})
    world = DriverWorld(nodes, **kwargs)  # type: ignore[arg-type]
    world.operand_pods = {(name, "device-plugin") for name in nodes}
    return world


class PlannerKit:
    """The driver planners' world above, handed to tests as the `pk` fixture."""

    world = DriverWorld
    driver = staticmethod(driver)
    gpu_node = staticmethod(gpu_node)
    installed_world = staticmethod(installed_world)


@pytest.fixture(scope="session")
def pk() -> PlannerKit:
    return PlannerKit()


@pytest.fixture(scope="session")
def kit() -> OperatorKit:
    return OperatorKit()


@pytest.fixture
def stub_cluster() -> Iterator[SimCluster]:
    with SimCluster(amd_nodes=3, nvidia_nodes=2, pods="stub") as cluster:
        install_operands(cluster.api())
        yield cluster
