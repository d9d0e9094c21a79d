"""Extended resources: a device plugin registering with a node's kubelet emulator shows on the Node.

The plugin is a real gRPC DevicePlugin server on a unix socket in the node root's device-plugins dir;
it registers on that node's kubelet.sock exactly as gpuop-device-plugin will.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from gpuop_common.kubelet import UnixServer, dial_unix, serve_unix
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_sim.cluster import SimCluster
from gpuop_sim.workloads.kubeapi import NODES, PODS

RESOURCE = "amd.com/gpu"


class FakeGpuPlugin(dp.DevicePluginServicer):
    """Serves a fixed set of devices and streams a new list whenever a device's health changes."""

    def __init__(self, devices: list[str]) -> None:
        self.health = dict.fromkeys(devices, dp.HEALTHY)
        self._version = 0
        self._cond = threading.Condition()
        self._closing = False
        self._server: UnixServer | None = None

    def GetDevicePluginOptions(  # noqa: N802
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions()

    def ListAndWatch(  # noqa: N802
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> Iterator[dp.ListAndWatchResponse]:
        seen = -1
        while context.is_active():
            with self._cond:
                while self._version == seen and not self._closing and context.is_active():
                    self._cond.wait(0.2)
                if self._closing:
                    return
                seen = self._version
                devices = [dp.Device(ID=d, health=h) for d, h in self.health.items()]
            yield dp.ListAndWatchResponse(devices=devices)

    def Allocate(  # noqa: N802
        self, request: dp.AllocateRequest, context: grpc.ServicerContext
    ) -> dp.AllocateResponse:
        responses = [
            dp.ContainerAllocateResponse(envs={"FAKE_VISIBLE_DEVICES": ",".join(r.devices_ids)})
            for r in request.container_requests
        ]
        return dp.AllocateResponse(container_responses=responses)

    def set_health(self, device: str, health: str) -> None:
        with self._cond:
            self.health[device] = health
            self._version += 1
            self._cond.notify_all()

    def start(self, socket_dir: Any) -> None:
        self._server = serve_unix(
            socket_dir / "fake-amd.sock", [lambda s: dp.add_DevicePluginServicer_to_server(self, s)]
        )
        with dial_unix(socket_dir / dp.KUBELET_SOCKET_NAME, timeout=10) as channel:
            dp.RegistrationStub(channel).Register(
                dp.RegisterRequest(version=dp.VERSION, endpoint="fake-amd.sock", resource_name=RESOURCE)
            )

    def stop(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.stop()


# A "container" that records its environment and then idles until SIGTERM.
ENV_DUMP = (
    "import json, os, sys, time; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ))); time.sleep(300)"
)


@pytest.fixture
def cluster() -> Iterator[SimCluster]:
    commands = {"test/env-dump": [sys.executable, "-c", ENV_DUMP]}
    with SimCluster(profiles=["amd-single", "cpu-only"], pods="process", image_commands=commands) as sim:
        yield sim


def gpu_resources(cluster: SimCluster, node: str) -> tuple[str | None, str | None]:
    status = cluster.api().get(NODES, node).get("status") or {}
    return (status.get("capacity") or {}).get(RESOURCE), (status.get("allocatable") or {}).get(RESOURCE)


def test_registered_plugin_devices_become_node_allocatable(cluster: SimCluster) -> None:
    node = cluster.node("amd-0")
    plugin = FakeGpuPlugin(["gpu-0", "gpu-1"])
    plugin.start(node.root / "var/lib/kubelet/device-plugins")
    try:
        cluster.wait_for(lambda: gpu_resources(cluster, "amd-0") == ("2", "2"), 20, what="2 GPUs allocatable")
        assert gpu_resources(cluster, "cpu-0") == (None, None)

        plugin.set_health("gpu-1", dp.UNHEALTHY)
        cluster.wait_for(lambda: gpu_resources(cluster, "amd-0") == ("2", "1"), 20, what="1 healthy GPU")

        # The scheduler counts the extended resource: one GPU fits, three never do.
        for name, count in (("one-gpu", 1), ("three-gpus", 3)):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": "test/none:1", "resources": {"limits": {RESOURCE: count}}}
                    ]
                },
            }
            cluster.api().create(PODS, pod, "default")
        bound = cluster.wait_for_object(PODS, "one-gpu", "default", lambda p: p["spec"].get("nodeName"))
        assert bound["spec"]["nodeName"] == "amd-0"

        def unschedulable(pod: dict[str, Any]) -> str | None:
            for cond in (pod.get("status") or {}).get("conditions") or []:
                if cond["type"] == "PodScheduled" and cond.get("reason") == "Unschedulable":
                    return str(cond["message"])
            return None

        stuck = cluster.wait_for_object(PODS, "three-gpus", "default", unschedulable)
        assert "Insufficient amd.com/gpu" in str(unschedulable(stuck))
    finally:
        plugin.stop()


def test_process_pod_gets_its_devices_from_the_plugin_and_releases_them(cluster: SimCluster) -> None:
    node = cluster.node("amd-0")
    plugin = FakeGpuPlugin(["gpu-0", "gpu-1"])
    plugin.start(node.root / "var/lib/kubelet/device-plugins")
    try:
        cluster.wait_for(lambda: gpu_resources(cluster, "amd-0") == ("2", "2"), 20, what="2 GPUs allocatable")
        report = cluster.state_dir / "env.json"
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "gpu-user", "namespace": "default"},
            "spec": {
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "main",
                        "image": "test/env-dump:1",
                        "args": [str(report)],
                        "resources": {"limits": {RESOURCE: 1}},
                    }
                ],
            },
        }
        cluster.api().create(PODS, pod, "default")
        cluster.wait_for_object(
            PODS, "gpu-user", "default", lambda p: (p.get("status") or {}).get("phase") == "Running"
        )
        env = cluster.wait_for(
            lambda: report.is_file() and json.loads(report.read_text() or "{}"), 20, what="env dump"
        )
        assert env["FAKE_VISIBLE_DEVICES"] in ("gpu-0", "gpu-1")
        emulator = cluster.kubelet_emulator("amd-0")
        (assignment,) = emulator.assignments()
        assert (assignment.name, assignment.namespace) == ("gpu-user", "default")

        cluster.api().delete(PODS, "gpu-user", "default")
        cluster.wait_for(lambda: not emulator.assignments(), 20, what="the devices to be released")
    finally:
        plugin.stop()


def test_pod_asking_for_devices_no_plugin_serves_fails_admission(cluster: SimCluster) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "no-plugin", "namespace": "default"},
        "spec": {
            "nodeName": "amd-0",
            "containers": [
                {"name": "main", "image": "test/env-dump:1", "resources": {"limits": {RESOURCE: 1}}}
            ],
        },
    }
    cluster.api().create(PODS, pod, "default")
    failed = cluster.wait_for_object(
        PODS, "no-plugin", "default", lambda p: (p.get("status") or {}).get("phase") == "Failed"
    )
    assert failed["status"]["reason"] == "UnexpectedAdmissionError"
