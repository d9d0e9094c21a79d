"""Kubelet emulator vs. a real device plugin: registration, ListAndWatch, allocation, restart, pod-resources.

The plugin below is written against the generated servicer and talks to the emulator over real unix
sockets, exactly as a device plugin talks to a kubelet.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from gpuop_common.kubelet import (
    SocketPathTooLongError,
    UnixServer,
    dial_unix,
    serve_unix,
    socket_identity,
    unix_channel,
)
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import podresources as pr
from gpuop_sim.kubelet import AllocationError, DeviceSnapshot, KubeletEmulator

RESOURCE = "example.com/gpu"
ENDPOINT = "example.com_gpu"


class ExamplePlugin(dp.DevicePluginServicer):
    """A minimal device plugin: serve first, register second, re-register when kubelet.sock is re-created."""

    def __init__(
        self,
        socket_dir: Path,
        devices: dict[str, str],
        *,
        resource: str = RESOURCE,
        endpoint: str = ENDPOINT,
        options: dp.DevicePluginOptions | None = None,
        preferred: list[str] | None = None,
    ) -> None:
        self.socket_dir = socket_dir
        self.resource = resource
        self.endpoint = endpoint
        self.options = options or dp.DevicePluginOptions()
        self.preferred = preferred or []
        self.registrations = 0
        self.allocate_requests: list[list[str]] = []
        self.preferred_requests: list[dp.ContainerPreferredAllocationRequest] = []
        self.pre_start_requests: list[list[str]] = []
        self._devices = dict(devices)
        self._numa: dict[str, int] = {}
        self._version = 0
        self._cond = threading.Condition()
        self._closing = False
        self._server: UnixServer | None = None
        self._watcher: threading.Thread | None = None
        self._stop = threading.Event()

    # --- DevicePlugin service ---

    def GetDevicePluginOptions(  # noqa: N802
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> dp.DevicePluginOptions:
        return self.options

    def ListAndWatch(  # noqa: N802
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> Iterator[dp.ListAndWatchResponse]:
        context.add_callback(self._wake)
        seen = -1
        while context.is_active():
            with self._cond:
                while self._version == seen and not self._closing and context.is_active():
                    self._cond.wait()
                if self._closing or not context.is_active():
                    return
                seen = self._version
                devices = [
                    dp.Device(
                        ID=dev_id,
                        health=health,
                        topology=dp.TopologyInfo(nodes=[dp.NUMANode(ID=self._numa[dev_id])])
                        if dev_id in self._numa
                        else None,
                    )
                    for dev_id, health in self._devices.items()
                ]
            yield dp.ListAndWatchResponse(devices=devices)

    def GetPreferredAllocation(  # noqa: N802
        self, request: dp.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> dp.PreferredAllocationResponse:
        self.preferred_requests.extend(request.container_requests)
        answers = [
            dp.ContainerPreferredAllocationResponse(deviceIDs=self.preferred[: r.allocation_size])
            for r in request.container_requests
        ]
        return dp.PreferredAllocationResponse(container_responses=answers)

    def Allocate(self, request: dp.AllocateRequest, context: grpc.ServicerContext) -> dp.AllocateResponse:  # noqa: N802
        responses = []
        for container in request.container_requests:
            ids = list(container.devices_ids)
            self.allocate_requests.append(ids)
            responses.append(
                dp.ContainerAllocateResponse(
                    envs={"EXAMPLE_VISIBLE_DEVICES": ",".join(ids)},
                    devices=[
                        dp.DeviceSpec(container_path=f"/dev/{i}", host_path=f"/dev/{i}", permissions="rw")
                        for i in ids
                    ],
                )
            )
        return dp.AllocateResponse(container_responses=responses)

    def PreStartContainer(  # noqa: N802
        self, request: dp.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> dp.PreStartContainerResponse:
        self.pre_start_requests.append(list(request.devices_ids))
        return dp.PreStartContainerResponse()

    # --- plugin side ---

    def set_devices(self, devices: dict[str, str], numa: dict[str, int] | None = None) -> None:
        with self._cond:
            self._devices = dict(devices)
            self._numa = dict(numa or {})
            self._version += 1
            self._cond.notify_all()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def serve(self) -> None:
        self._server = serve_unix(
            self.socket_dir / self.endpoint,
            [lambda s: dp.add_DevicePluginServicer_to_server(self, s)],
            thread_name_prefix="example-plugin",
        )

    def register(
        self, version: str = dp.VERSION, resource: str | None = None, endpoint: str | None = None
    ) -> None:
        channel = dial_unix(self.socket_dir / dp.KUBELET_SOCKET_NAME, timeout=5)
        try:
            request = dp.RegisterRequest(
                version=version,
                endpoint=self.endpoint if endpoint is None else endpoint,
                resource_name=self.resource if resource is None else resource,
                options=self.options,
            )
            dp.RegistrationStub(channel).Register(request, timeout=5)
        finally:
            channel.close()
        self.registrations += 1

    def start(self) -> ExamplePlugin:
        self.serve()
        self.register()
        kubelet_sock = self.socket_dir / dp.KUBELET_SOCKET_NAME
        self._watcher = threading.Thread(target=self._watch_kubelet, args=(socket_identity(kubelet_sock),))
        self._watcher.start()
        return self

    def _watch_kubelet(self, identity: tuple[int, int] | None) -> None:
        # Stands in for the inotify watch real plugins keep on kubelet.sock.
        kubelet_sock = self.socket_dir / dp.KUBELET_SOCKET_NAME
        while not self._stop.wait(0.02):
            current = socket_identity(kubelet_sock)
            if current is not None and current != identity:
                identity = current
                self._restart_server()
                self.register()

    def _restart_server(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None)
        self.serve()

    def stop(self) -> None:
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join()
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._server is not None:
            self._server.stop(grace=None)


@pytest.fixture
def plugins(kubelet_emulator: KubeletEmulator) -> Iterator[list[ExamplePlugin]]:
    started: list[ExamplePlugin] = []
    yield started
    for plugin in started:
        plugin.stop()


def _plugin(
    kubelet: KubeletEmulator, started: list[ExamplePlugin], devices: dict[str, str], **kw: object
) -> ExamplePlugin:
    plugin = ExamplePlugin(kubelet.socket_dir, devices, **kw)  # type: ignore[arg-type]
    started.append(plugin)
    return plugin.start()


HEALTHY2 = {"gpu-0": dp.HEALTHY, "gpu-1": dp.HEALTHY}


def test_registered_plugin_devices_become_node_resources(
    kubelet_emulator: KubeletEmulator, plugins: list[ExamplePlugin]
) -> None:
    seen: list[DeviceSnapshot] = []
    kubelet_emulator.add_change_listener(seen.append)
    _plugin(kubelet_emulator, plugins, HEALTHY2, options=dp.DevicePluginOptions(pre_start_required=True))

    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(RESOURCE) == 2, timeout=5)

    assert kubelet_emulator.resources() == {RESOURCE: HEALTHY2}
    assert kubelet_emulator.capacity() == {RESOURCE: 2}
    options = kubelet_emulator.plugin_options(RESOURCE)
    assert options is not None and options.pre_start_required
    # Listeners run on the stream thread, right after the change the predicate above observed.
    kubelet_emulator.wait_for(lambda: bool(seen) and seen[-1].allocatable() == {RESOURCE: 2}, timeout=5)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"version": "v1alpha"}, "version 'v1alpha' is not supported"),
        ({"resource": "gpu"}, "invalid extended resource name 'gpu'"),
        ({"resource": "kubernetes.io/gpu"}, "invalid extended resource name"),
        ({"endpoint": "missing.sock"}, "missing.sock does not exist"),
        ({"endpoint": "../escape.sock"}, "invalid endpoint"),
    ],
)
def test_bad_registration_is_refused_with_a_grpc_error(
    kubelet_emulator: KubeletEmulator, kwargs: dict[str, str], message: str
) -> None:
    plugin = ExamplePlugin(kubelet_emulator.socket_dir, HEALTHY2)
    plugin.serve()
    try:
        with pytest.raises(grpc.RpcError) as raised:
            plugin.register(**kwargs)
    finally:
        plugin.stop()
    assert raised.value.code() == grpc.StatusCode.UNKNOWN
    assert message in raised.value.details()
    assert kubelet_emulator.resources() == {}


def test_health_and_device_list_updates_replace_the_device_set(
    kubelet_emulator: KubeletEmulator, plugins: list[ExamplePlugin]
) -> None:
    plugin = _plugin(kubelet_emulator, plugins, HEALTHY2)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(RESOURCE) == 2, timeout=5)

    plugin.set_devices({"gpu-0": dp.HEALTHY, "gpu-1": dp.UNHEALTHY})
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(RESOURCE) == 1, timeout=5)
    assert kubelet_emulator.capacity() == {RESOURCE: 2}

    plugin.set_devices({"gpu-2": dp.HEALTHY})  # full replacement: gpu-0 and gpu-1 are gone
    kubelet_emulator.wait_for(
        lambda: kubelet_emulator.resources().get(RESOURCE) == {"gpu-2": dp.HEALTHY}, timeout=5
    )
    assert kubelet_emulator.capacity() == {RESOURCE: 1}


def test_allocate_round_trip_with_pre_start(
    kubelet_emulator: KubeletEmulator, plugins: list[ExamplePlugin]
) -> None:
    plugin = _plugin(
        kubelet_emulator, plugins, HEALTHY2, options=dp.DevicePluginOptions(pre_start_required=True)
    )
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(RESOURCE) == 2, timeout=5)

    allocation = kubelet_emulator.allocate(RESOURCE, ["gpu-1"])

    assert allocation.device_ids == ["gpu-1"]
    assert dict(allocation.response.envs) == {"EXAMPLE_VISIBLE_DEVICES": "gpu-1"}
    assert [d.host_path for d in allocation.response.devices] == ["/dev/gpu-1"]
    assert plugin.allocate_requests == [["gpu-1"]]
    assert plugin.pre_start_requests == [["gpu-1"]]
    assert plugin.preferred_requests == []  # explicit ids: no selection, no preference asked


def test_preferred_allocation_is_asked_when_advertised(
    kubelet_emulator: KubeletEmulator, plugins: list[ExamplePlugin]
) -> None:
    devices = {f"gpu-{i}": dp.HEALTHY for i in range(4)}
    plugin = _plugin(
        kubelet_emulator,
        plugins,
        devices,
        options=dp.DevicePluginOptions(get_preferred_allocation_available=True),
        preferred=["gpu-3", "not-a-device", "gpu-2"],
    )
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(RESOURCE) == 4, timeout=5)
    kubelet_emulator.assign("busy", "default", "main", RESOURCE, ["gpu-0"])

    allocation = kubelet_emulator.allocate(RESOURCE, 2, pod="job", namespace="ml")

    request = plugin.preferred_requests[0]
    assert list(request.available_deviceIDs) == ["gpu-1", "gpu-2", "gpu-3"]
    assert request.allocation_size == 2
    # The answer is advisory: "not-a-device" is dropped and the slot filled from the available set.
    assert allocation.device_ids == ["gpu-3", "gpu-1"]
    assert plugin.allocate_requests == [["gpu-3", "gpu-1"]]
    assert kubelet_emulator.get_preferred_allocation(RESOURCE, ["gpu-1", "gpu-2"], ["gpu-1"], 1) == ["gpu-3"]


def test_preferred_allocation_not_asked_when_not_advertised(
    kubelet_emulator: KubeletEmulator, plugins: list[ExamplePlugin]
) -> None:
    plugin = _plugin(kubelet_emulator, plugins, HEALTHY2)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(RESOURCE) == 2, timeout=5)
    assert kubelet_emulator.allocate(RESOURCE, 1).device_ids == ["gpu-0"]
    assert plugin.preferred_requests == []


def test_allocation_refusals(kubelet_emulator: KubeletEmulator, plugins: list[ExamplePlugin]) -> None:
    plugin = _plugin(kubelet_emulator, plugins, {"gpu-0": dp.HEALTHY, "gpu-1": dp.UNHEALTHY})
    kubelet_emulator.wait_for(lambda: kubelet_emulator.capacity().get(RESOURCE) == 2, timeout=5)
    with pytest.raises(AllocationError, match="no device plugin registered"):
        kubelet_emulator.allocate("example.com/other", 1)
    with pytest.raises(AllocationError, match="only 1 healthy devices are free"):
        kubelet_emulator.allocate(RESOURCE, 2)
    with pytest.raises(AllocationError, match="'Unhealthy', not Healthy"):
        kubelet_emulator.allocate(RESOURCE, ["gpu-1"])
    kubelet_emulator.allocate(RESOURCE, 1, pod="a")
    with pytest.raises(AllocationError, match="already allocated"):
        kubelet_emulator.allocate(RESOURCE, ["gpu-0"], pod="b")
    assert plugin.allocate_requests == [["gpu-0"]]


def test_kubelet_restart_requires_registration_again(
    kubelet_emulator: KubeletEmulator, plugins: list[ExamplePlugin]
) -> None:
    plugin = _plugin(kubelet_emulator, plugins, HEALTHY2)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(RESOURCE) == 2, timeout=5)
    old_identity = socket_identity(kubelet_emulator.kubelet_socket)
    plugin_socket = kubelet_emulator.socket_dir / ENDPOINT

    kubelet_emulator.restart()

    assert socket_identity(kubelet_emulator.kubelet_socket) not in {None, old_identity}
    assert (kubelet_emulator.socket_dir / dp.KUBELET_CHECKPOINT_NAME).is_file()
    kubelet_emulator.wait_for(lambda: plugin.registrations == 2, timeout=5)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(RESOURCE) == 2, timeout=5)
    assert plugin_socket.exists()
    assert kubelet_emulator.resources() == {RESOURCE: HEALTHY2}


def test_restart_wipes_plugin_sockets_and_zeroes_capacity(kubelet_emulator: KubeletEmulator) -> None:
    plugin = ExamplePlugin(kubelet_emulator.socket_dir, HEALTHY2)
    plugin.serve()
    plugin.register()  # no watcher: this plugin will not come back
    try:
        kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(RESOURCE) == 2, timeout=5)
        kubelet_emulator.restart()
        assert not (kubelet_emulator.socket_dir / ENDPOINT).exists()
        assert kubelet_emulator.capacity() == {RESOURCE: 0}
    finally:
        plugin.stop()


def test_newer_registration_replaces_the_old_plugin(
    kubelet_emulator: KubeletEmulator, plugins: list[ExamplePlugin]
) -> None:
    _plugin(kubelet_emulator, plugins, HEALTHY2)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get(RESOURCE) == 2, timeout=5)
    newer = _plugin(kubelet_emulator, plugins, {"gpu-9": dp.HEALTHY}, endpoint="example.com_gpu-2")
    kubelet_emulator.wait_for(
        lambda: kubelet_emulator.resources().get(RESOURCE) == {"gpu-9": dp.HEALTHY}, timeout=5
    )
    kubelet_emulator.allocate(RESOURCE, 1)
    assert newer.allocate_requests == [["gpu-9"]]


def test_plugin_death_marks_devices_unhealthy_then_removes_them(short_tmp_dir: Path) -> None:
    with KubeletEmulator(short_tmp_dir, endpoint_grace_s=1.0) as kubelet:
        plugin = ExamplePlugin(kubelet.socket_dir, HEALTHY2)
        plugin.serve()
        plugin.register()
        kubelet.wait_for(lambda: kubelet.allocatable().get(RESOURCE) == 2, timeout=5)
        plugin.stop()
        kubelet.wait_for(
            lambda: kubelet.capacity().get(RESOURCE) == 2 and kubelet.allocatable()[RESOURCE] == 0, 5
        )
        kubelet.wait_for(lambda: RESOURCE not in kubelet.resources(), timeout=5)


def test_pod_resources_reflect_assignments(
    kubelet_emulator: KubeletEmulator, plugins: list[ExamplePlugin]
) -> None:
    plugin = _plugin(kubelet_emulator, plugins, HEALTHY2)
    plugin.set_devices(HEALTHY2, numa={"gpu-0": 0, "gpu-1": 1})

    def topology_arrived() -> bool:
        devices = kubelet_emulator.snapshot().devices.get(RESOURCE, {})
        return "gpu-1" in devices and devices["gpu-1"].numa_nodes == (1,)

    kubelet_emulator.wait_for(topology_arrived, timeout=5)
    kubelet_emulator.allocate(RESOURCE, ["gpu-1"], pod="trainer", namespace="ml", container="worker")
    channel = unix_channel(kubelet_emulator.pod_resources_socket)
    lister = pr.PodResourcesListerStub(channel)
    try:
        listed = lister.List(pr.ListPodResourcesRequest(), timeout=5).pod_resources
        assert [(p.name, p.namespace) for p in listed] == [("trainer", "ml")]
        container = listed[0].containers[0]
        assert container.name == "worker"
        assert [
            (d.resource_name, list(d.device_ids), [n.ID for n in d.topology.nodes]) for d in container.devices
        ] == [(RESOURCE, ["gpu-1"], [1])]

        allocatable = lister.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5)
        assert sorted((list(d.device_ids), d.topology.nodes[0].ID) for d in allocatable.devices) == [
            (["gpu-0"], 0),
            (["gpu-1"], 1),
        ]

        got = lister.Get(pr.GetPodResourcesRequest(pod_name="trainer", pod_namespace="ml"), timeout=5)
        assert got.pod_resources.containers[0].devices[0].device_ids == ["gpu-1"]
        with pytest.raises(grpc.RpcError) as raised:
            lister.Get(pr.GetPodResourcesRequest(pod_name="nope", pod_namespace="ml"), timeout=5)
        assert raised.value.details() == "pod nope in namespace ml not found"

        assert kubelet_emulator.release("trainer", "ml")
        assert list(lister.List(pr.ListPodResourcesRequest(), timeout=5).pod_resources) == []
    finally:
        channel.close()


def test_pod_resources_rate_limit(short_tmp_dir: Path) -> None:
    with KubeletEmulator(short_tmp_dir, pod_resources_qps=0.001, pod_resources_burst=2) as kubelet:
        channel = unix_channel(kubelet.pod_resources_socket)
        lister = pr.PodResourcesListerStub(channel)
        try:
            for _ in range(2):
                lister.List(pr.ListPodResourcesRequest(), timeout=5)
            with pytest.raises(grpc.RpcError) as raised:
                lister.List(pr.ListPodResourcesRequest(), timeout=5)
        finally:
            channel.close()
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_too_long_root_is_refused_naming_the_socket(short_tmp_dir: Path) -> None:
    deep = short_tmp_dir / ("d" * 80)
    with pytest.raises(SocketPathTooLongError, match=r"kubelet\.sock"):
        KubeletEmulator(deep)


def test_stop_leaves_no_threads_or_sockets(short_tmp_dir: Path) -> None:
    kubelet = KubeletEmulator(short_tmp_dir).start()
    plugin = ExamplePlugin(kubelet.socket_dir, HEALTHY2).start()
    kubelet.wait_for(lambda: kubelet.allocatable().get(RESOURCE) == 2, timeout=5)
    kubelet.stop()
    plugin.stop()
    assert not [t.name for t in threading.enumerate() if t.name.startswith(("kubelet-emu", "example-plugin"))]
    assert not kubelet.kubelet_socket.exists()
    assert not kubelet.pod_resources_socket.exists()
