"""Kubelet emulator's plugin watcher: registration through plugins_registry/, DRA prepare/unprepare and
the DRA resource health stream."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from gpuop_common.kubelet import ServicerAdder, UnixServer, dra, drahealth, serve_unix
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import pluginregistration as reg
from gpuop_sim.kubelet import DraClaim, DraError, KubeletEmulator, PreparedDevice
from gpuop_sim.kubelet.drahealth import HealthCache
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
    kubelet: KubeletEmulator,
    servers: list[UnixServer],
    versions: list[str],
    health: drahealth.DRAResourceHealthServicer | None = None,
) -> RegistrationPlugin:
    """A DRA driver on <plugins>/<driver>/dra.sock (with `health`, the health stream too), registered
    with `versions`."""
    service_dir = kubelet.root / "var/lib/kubelet/plugins" / DRIVER
    service_dir.mkdir(parents=True, exist_ok=True)
    endpoint = service_dir / "dra.sock"
    adders: list[ServicerAdder] = []
    if versions[0] == dra.SERVICE_V1:
        v1 = ExampleDriverV1()
        adders.append(lambda s: dra.v1_grpc.add_DRAPluginServicer_to_server(v1, s))
    else:
        v1beta1 = ExampleDriver()
        adders.append(lambda s: dra.add_DRAPluginServicer_to_server(v1beta1, s))
    if health is not None:
        adders.append(lambda s: drahealth.add_DRAResourceHealthServicer_to_server(health, s))
    servers.append(serve_unix(endpoint, adders))
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


# --- the DRA resource health stream ---


class ExampleHealth(drahealth.DRAResourceHealthServicer):
    """Streams what the test puts into `messages`; None ends the stream (the driver went away)."""

    def __init__(self) -> None:
        self.messages: queue.Queue[drahealth.NodeWatchResourcesResponse | None] = queue.Queue()
        self.opened = 0
        self.cancelled = threading.Event()

    def NodeWatchResources(  # noqa: N802
        self, request: drahealth.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[drahealth.NodeWatchResourcesResponse]:
        self.opened += 1
        while context.is_active():
            try:
                message = self.messages.get(timeout=0.05)
            except queue.Empty:
                continue
            if message is None:
                return
            yield message
        self.cancelled.set()


def health_message(
    *devices: tuple[str, int, str], timeout_s: int = 0
) -> drahealth.NodeWatchResourcesResponse:
    return drahealth.NodeWatchResourcesResponse(
        devices=[
            drahealth.DeviceHealth(
                device=drahealth.DeviceIdentifier(pool_name="node-a", device_name=name),
                health=health,
                last_updated_time=1_760_000_000,
                health_check_timeout_seconds=timeout_s,
                message=message,
            )
            for name, health, message in devices
        ]
    )


def healths(kubelet: KubeletEmulator) -> dict[str, tuple[str, str]]:
    return {dev: (h.health, h.message) for (_, dev), h in kubelet.dra_device_health(DRIVER).items()}


@pytest.fixture
def quick_retry_kubelet(short_tmp_dir: Path) -> Iterator[KubeletEmulator]:
    """An emulator that opens an ended health stream again after 0.2 s instead of the kubelet's 5 s."""
    with KubeletEmulator(short_tmp_dir, dra_health_retry_s=0.2) as kubelet:
        yield kubelet


def test_the_health_stream_of_a_driver_that_lists_it_feeds_the_claims_status(
    kubelet_emulator: KubeletEmulator, servers: list[UnixServer]
) -> None:
    health = ExampleHealth()
    _serve_driver(kubelet_emulator, servers, [dra.SERVICE_V1BETA1, drahealth.SERVICE], health)
    kubelet_emulator.wait_for(lambda: health.opened == 1, timeout=5)
    claim = DraClaim("ml", "uid-1", "one")  # ExampleDriver prepares device gpu-one of pool node-a
    assert kubelet_emulator.prepare(DRIVER, [claim])["uid-1"].error == ""
    assert kubelet_emulator.dra_claim_health("uid-1")[("node-a", "gpu-one")].health == "Unknown"

    health.messages.put(
        health_message(("gpu-one", drahealth.HEALTHY, ""), ("gpu-two", drahealth.HEALTHY, ""))
    )
    kubelet_emulator.wait_for(lambda: len(healths(kubelet_emulator)) == 2, timeout=5)
    assert kubelet_emulator.dra_claim_health("uid-1")[("node-a", "gpu-one")].health == "Healthy"

    health.messages.put(health_message(("gpu-one", drahealth.UNHEALTHY, "ras_uncorrectable_increase")))
    kubelet_emulator.wait_for(lambda: healths(kubelet_emulator)["gpu-one"][0] == "Unhealthy", timeout=5)
    # A device the message leaves out keeps its last report (until that report times out).
    assert healths(kubelet_emulator) == {
        "gpu-one": ("Unhealthy", "ras_uncorrectable_increase"),
        "gpu-two": ("Healthy", ""),
    }
    (status,) = kubelet_emulator.dra_claim_health("uid-1").values()
    assert (status.health, status.message, status.last_updated_time) == (
        "Unhealthy",
        "ras_uncorrectable_increase",
        1_760_000_000,
    )
    assert set(kubelet_emulator.dra_prepared_claims()) == {"uid-1"}

    assert kubelet_emulator.unprepare(DRIVER, [claim]) == {"uid-1": ""}
    assert kubelet_emulator.dra_prepared_claims() == {}
    with pytest.raises(DraError, match="not prepared"):
        kubelet_emulator.dra_claim_health("uid-1")


def test_no_health_stream_for_a_driver_that_does_not_list_it(
    kubelet_emulator: KubeletEmulator, servers: list[UnixServer]
) -> None:
    health = ExampleHealth()
    plugin = _serve_driver(kubelet_emulator, servers, [dra.SERVICE_V1BETA1], health)
    kubelet_emulator.wait_for(lambda: bool(plugin.statuses), timeout=5)
    # The registration is complete (the stream would have been opened before the notification).
    assert kubelet_emulator.prepare(DRIVER, [DraClaim("ml", "uid-1", "one")])["uid-1"].error == ""
    assert health.opened == 0
    assert kubelet_emulator.dra_device_health(DRIVER) == {}


def test_an_ended_health_stream_is_opened_again_after_a_pause_while_registered(
    quick_retry_kubelet: KubeletEmulator, servers: list[UnixServer]
) -> None:
    kubelet = quick_retry_kubelet
    health = ExampleHealth()
    _serve_driver(kubelet, servers, [dra.SERVICE_V1, drahealth.SERVICE], health)
    health.messages.put(health_message(("gpu-0", drahealth.HEALTHY, "")))
    kubelet.wait_for(lambda: healths(kubelet) == {"gpu-0": ("Healthy", "")}, timeout=5)

    ended = time.monotonic()
    health.messages.put(None)  # the driver ends the stream: the kubelet forgets what it said
    kubelet.wait_for(lambda: healths(kubelet) == {}, timeout=5)
    kubelet.wait_for(lambda: health.opened == 2, timeout=5)
    assert time.monotonic() - ended >= 0.2  # not at once: after the retry pause
    health.messages.put(health_message(("gpu-0", drahealth.UNHEALTHY, "gpu_vanished")))
    kubelet.wait_for(lambda: healths(kubelet) == {"gpu-0": ("Unhealthy", "gpu_vanished")}, timeout=5)

    # Deregistered (the registration socket went): the stream is cancelled and not opened again.
    servers.pop().stop(grace=None)
    kubelet.wait_for(lambda: kubelet.dra_drivers() == {}, timeout=5)
    assert health.cancelled.wait(timeout=5)
    assert healths(kubelet) == {}
    assert health.opened == 2


def test_a_health_report_older_than_its_timeout_reads_unknown() -> None:
    now = [100.0]
    cache = HealthCache(clock=lambda: now[0])
    cache.update(
        DRIVER,
        health_message(("gpu-0", drahealth.UNHEALTHY, "x"), timeout_s=5),
    )
    cache.update(DRIVER, health_message(("gpu-1", drahealth.HEALTHY, "")))  # 0: the kubelet's 30 s
    now[0] = 105.0
    assert {d: h.health for (_, d), h in cache.devices(DRIVER).items()} == {
        "gpu-0": "Unhealthy",
        "gpu-1": "Healthy",
    }
    now[0] = 105.5
    stale = cache.device(DRIVER, "node-a", "gpu-0")
    assert (stale.health, stale.message) == ("Unknown", "")
    assert cache.device(DRIVER, "node-a", "gpu-1").health == "Healthy"
    now[0] = 130.5
    assert cache.device(DRIVER, "node-a", "gpu-1").health == "Unknown"
    assert cache.device(DRIVER, "node-a", "never-reported").health == "Unknown"
