"""Kubelet emulator's plugin watcher: registration through plugins_registry/, and DRA prepare/unprepare."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from gpuop_common.kubelet import UnixServer, dra, serve_unix
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import pluginregistration as reg
from gpuop_sim.kubelet import DraClaim, DraError, KubeletEmulator, PreparedDevice
from gpuop_sim.shortpaths import short_tmp_base

DRIVER = "gpu.example.com"


class RegistrationPlugin(reg.RegistrationServicer):
    """The plugin side of plugin-watcher registration: answers GetInfo, records the status it gets."""

    def __init__(self, info: reg.PluginInfo) -> None:
        self.info = info
        self.statuses: list[reg.RegistrationStatus] = []
        self._lock = threading.Lock()

    def GetInfo(self, request: reg.InfoRequest, context: grpc.ServicerContext) -> reg.PluginInfo:  # noqa: N802
        return self.info

    def NotifyRegistrationStatus(  # noqa: N802
        self, request: reg.RegistrationStatus, context: grpc.ServicerContext
    ) -> reg.RegistrationStatusResponse:
        with self._lock:
            self.statuses.append(request)
        return reg.RegistrationStatusResponse()


class ExampleDriver(dra.DRAPluginServicer):
    """A v1beta1 DRA driver: one device per claim, named after the claim; claim "bad" fails."""

    def __init__(self) -> None:
        self.prepared: set[str] = set()

    def NodePrepareResources(  # noqa: N802
        self, request: dra.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodePrepareResourcesResponse:
        response = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            if claim.name == "bad":
                response.claims[claim.uid].error = "no such device"
                continue
            self.prepared.add(claim.uid)
            response.claims[claim.uid].devices.append(
                dra.Device(
                    request_names=["gpu"],
                    pool_name="node-a",
                    device_name=f"gpu-{claim.name}",
                    cdi_device_ids=[f"example.com/gpu=gpu-{claim.name}"],
                )
            )
        return response

    def NodeUnprepareResources(  # noqa: N802
        self, request: dra.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.NodeUnprepareResourcesResponse:
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            self.prepared.discard(claim.uid)
            response.claims[claim.uid].error = ""
        return response


class ExampleDriverV1(dra.v1_grpc.DRAPluginServicer):
    def NodePrepareResources(  # noqa: N802
        self, request: dra.v1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.v1.NodePrepareResourcesResponse:
        response = dra.v1.NodePrepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].devices.append(
                dra.v1.Device(pool_name="node-a", device_name="gpu-0", share_id="share-1")
            )
        return response

    def NodeUnprepareResources(  # noqa: N802
        self, request: dra.v1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> dra.v1.NodeUnprepareResourcesResponse:
        return dra.v1.NodeUnprepareResourcesResponse(
            claims={c.uid: dra.v1.NodeUnprepareResourceResponse() for c in request.claims}
        )


@pytest.fixture
def servers() -> Iterator[list[UnixServer]]:
    started: list[UnixServer] = []
    yield started
    for server in reversed(started):
        server.stop(grace=None)


def _serve_registration(
    kubelet: KubeletEmulator, servers: list[UnixServer], info: reg.PluginInfo, name: str
) -> RegistrationPlugin:
    plugin = RegistrationPlugin(info)
    servers.append(
        serve_unix(
            kubelet.plugins_registry / name, [lambda s: reg.add_RegistrationServicer_to_server(plugin, s)]
        )
    )
    return plugin


def _serve_driver(
    kubelet: KubeletEmulator, servers: list[UnixServer], versions: list[str]
) -> RegistrationPlugin:
    service_dir = kubelet.root / "var/lib/kubelet/plugins" / DRIVER
    service_dir.mkdir(parents=True)
    endpoint = service_dir / "dra.sock"
    if versions[0] == dra.SERVICE_V1:
        v1 = ExampleDriverV1()
        servers.append(serve_unix(endpoint, [lambda s: dra.v1_grpc.add_DRAPluginServicer_to_server(v1, s)]))
    else:
        v1beta1 = ExampleDriver()
        servers.append(serve_unix(endpoint, [lambda s: dra.add_DRAPluginServicer_to_server(v1beta1, s)]))
    info = reg.PluginInfo(
        type=reg.DRA_PLUGIN, name=DRIVER, endpoint=str(endpoint), supported_versions=versions
    )
    return _serve_registration(kubelet, servers, info, f"{DRIVER}-reg.sock")


def test_dra_driver_registers_and_prepares_claims(
    kubelet_emulator: KubeletEmulator, servers: list[UnixServer]
) -> None:
    plugin = _serve_driver(kubelet_emulator, servers, [dra.SERVICE_V1BETA1])

    kubelet_emulator.wait_for(lambda: bool(plugin.statuses), timeout=5)

    assert [(s.plugin_registered, s.error) for s in plugin.statuses] == [(True, "")]
    [registered] = kubelet_emulator.registered_plugins()
    assert (registered.type, registered.name) == (reg.DRA_PLUGIN, DRIVER)
    assert registered.socket == kubelet_emulator.plugins_registry / f"{DRIVER}-reg.sock"
    assert kubelet_emulator.dra_drivers() == {DRIVER: dra.SERVICE_V1BETA1}

    claims = [DraClaim("ml", "uid-1", "one"), DraClaim("ml", "uid-2", "bad")]
    results = kubelet_emulator.prepare(DRIVER, claims)
    assert results["uid-1"].error == ""
    assert results["uid-1"].devices == (
        PreparedDevice("node-a", "gpu-one", ("gpu",), ("example.com/gpu=gpu-one",)),
    )
    assert results["uid-2"].error == "no such device"
    assert kubelet_emulator.unprepare(DRIVER, claims[:1]) == {"uid-1": ""}


def test_dra_v1_is_used_when_the_driver_lists_it_first(
    kubelet_emulator: KubeletEmulator, servers: list[UnixServer]
) -> None:
    plugin = _serve_driver(kubelet_emulator, servers, [dra.SERVICE_V1, dra.SERVICE_V1BETA1])
    kubelet_emulator.wait_for(lambda: bool(plugin.statuses), timeout=5)
    assert kubelet_emulator.dra_drivers() == {DRIVER: dra.SERVICE_V1}
    result = kubelet_emulator.prepare(DRIVER, [DraClaim("ml", "uid-1", "one")])
    assert result["uid-1"].devices[0].share_id == "share-1"
    assert kubelet_emulator.unprepare(DRIVER, [DraClaim("ml", "uid-1", "one")]) == {"uid-1": ""}


def test_unsupported_dra_versions_are_refused_and_notified(
    kubelet_emulator: KubeletEmulator, servers: list[UnixServer]
) -> None:
    plugin = _serve_driver(kubelet_emulator, servers, ["v1alpha3.DRAPlugin"])
    kubelet_emulator.wait_for(lambda: bool(plugin.statuses), timeout=5)
    status = plugin.statuses[0]
    assert not status.plugin_registered
    assert "v1alpha3.DRAPlugin" in status.error
    assert kubelet_emulator.registered_plugins() == []
    assert list(kubelet_emulator.registration_failures().values()) == [status.error]
    with pytest.raises(DraError, match="not registered"):
        kubelet_emulator.prepare(DRIVER, [DraClaim("ml", "uid-1", "one")])


def test_unknown_plugin_type_is_refused(kubelet_emulator: KubeletEmulator, servers: list[UnixServer]) -> None:
    info = reg.PluginInfo(
        type="CSIPlugin", name="csi.example.com", endpoint="/csi.sock", supported_versions=["1.0"]
    )
    plugin = _serve_registration(kubelet_emulator, servers, info, "csi.sock")
    kubelet_emulator.wait_for(lambda: bool(plugin.statuses), timeout=5)
    assert not plugin.statuses[0].plugin_registered
    assert "no handler registered for plugin type: 'CSIPlugin'" in plugin.statuses[0].error


def test_removing_the_registration_socket_deregisters(
    kubelet_emulator: KubeletEmulator, servers: list[UnixServer]
) -> None:
    plugin = _serve_driver(kubelet_emulator, servers, [dra.SERVICE_V1BETA1])
    kubelet_emulator.wait_for(lambda: bool(plugin.statuses), timeout=5)
    assert kubelet_emulator.dra_drivers() == {DRIVER: dra.SERVICE_V1BETA1}
    registration = servers.pop()
    registration.stop(grace=None)
    kubelet_emulator.wait_for(lambda: kubelet_emulator.registered_plugins() == [], timeout=5)
    assert kubelet_emulator.dra_drivers() == {}
    assert len(plugin.statuses) == 1


def test_dot_sockets_are_ignored(kubelet_emulator: KubeletEmulator, servers: list[UnixServer]) -> None:
    hidden = _serve_registration(
        kubelet_emulator,
        servers,
        reg.PluginInfo(
            type=reg.DRA_PLUGIN, name="hidden", endpoint="/x.sock", supported_versions=["v1.DRAPlugin"]
        ),
        ".hidden.sock",
    )
    visible = _serve_driver(kubelet_emulator, servers, [dra.SERVICE_V1BETA1])
    kubelet_emulator.wait_for(lambda: bool(visible.statuses), timeout=5)
    assert hidden.statuses == []


class _Devices(dp.DevicePluginServicer):
    def GetDevicePluginOptions(  # noqa: N802
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> dp.DevicePluginOptions:
        return dp.DevicePluginOptions()

    def ListAndWatch(  # noqa: N802
        self, request: dp.Empty, context: grpc.ServicerContext
    ) -> Iterator[dp.ListAndWatchResponse]:
        yield dp.ListAndWatchResponse(devices=[dp.Device(ID="gpu-0", health=dp.HEALTHY)])
        done = threading.Event()
        context.add_callback(done.set)
        done.wait()


def test_device_plugin_can_register_through_the_watcher(
    kubelet_emulator: KubeletEmulator, servers: list[UnixServer]
) -> None:
    endpoint = kubelet_emulator.root / "dp.sock"
    servers.append(serve_unix(endpoint, [lambda s: dp.add_DevicePluginServicer_to_server(_Devices(), s)]))
    info = reg.PluginInfo(
        type=reg.DEVICE_PLUGIN,
        name="example.com/gpu",
        endpoint=str(endpoint),
        supported_versions=[dp.VERSION],
    )
    plugin = _serve_registration(kubelet_emulator, servers, info, "example.com-gpu.sock")

    kubelet_emulator.wait_for(lambda: bool(plugin.statuses), timeout=5)
    assert plugin.statuses[0].plugin_registered
    kubelet_emulator.wait_for(lambda: kubelet_emulator.allocatable().get("example.com/gpu") == 1, timeout=5)


def test_plugins_register_again_after_a_kubelet_restart(
    kubelet_emulator: KubeletEmulator, servers: list[UnixServer]
) -> None:
    plugin = _serve_driver(kubelet_emulator, servers, [dra.SERVICE_V1BETA1])
    kubelet_emulator.wait_for(lambda: len(plugin.statuses) == 1, timeout=5)
    kubelet_emulator.restart()
    # plugins_registry sockets survive a kubelet restart; the watcher finds them again.
    kubelet_emulator.wait_for(lambda: len(plugin.statuses) == 2, timeout=5)
    assert kubelet_emulator.dra_drivers() == {DRIVER: dra.SERVICE_V1BETA1}


def test_kubelet_emulator_fixture_uses_short_socket_paths(kubelet_emulator: KubeletEmulator) -> None:
    assert kubelet_emulator.kubelet_socket.is_socket()
    assert len(str(kubelet_emulator.root / "var/lib/kubelet/plugins_registry/gpu.example.com-reg.sock")) < 100
    assert kubelet_emulator.root.parent == Path(short_tmp_base())
