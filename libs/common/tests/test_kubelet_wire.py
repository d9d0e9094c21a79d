"""Wire compatibility with the kubelet: field numbers/types from kubelet-api.md and gRPC method paths."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import dra, drahealth, serve_unix, unix_channel
from gpuop_common.kubelet import pluginregistration as reg
from gpuop_common.kubelet import podresources as pr

# --- a minimal protobuf encoder, so expected bytes come from the fact sheet, not from our stubs ---


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1  # negative int64 values encode as 10-byte two's complement
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def vint(number: int, value: int) -> bytes:
    return _varint(number << 3 | 0) + _varint(value)


def ln(number: int, payload: bytes | str) -> bytes:
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def test_register_request_bytes() -> None:
    options = vint(1, 1) + vint(2, 1)
    expected = ln(1, "v1beta1") + ln(2, "amd.com_gpu") + ln(3, "amd.com/gpu") + ln(4, options)
    message = dp.RegisterRequest(
        version="v1beta1",
        endpoint="amd.com_gpu",
        resource_name="amd.com/gpu",
        options=dp.DevicePluginOptions(pre_start_required=True, get_preferred_allocation_available=True),
    )
    assert message.SerializeToString() == expected
    decoded = dp.RegisterRequest.FromString(expected)
    assert decoded.options.get_preferred_allocation_available


def test_list_and_watch_device_bytes() -> None:
    device = ln(1, "gpu-0") + ln(2, "Healthy") + ln(3, ln(1, vint(1, 1)))
    decoded = dp.ListAndWatchResponse.FromString(ln(1, device) + ln(1, ln(1, "gpu-1") + ln(2, "Unhealthy")))
    assert [(d.ID, d.health) for d in decoded.devices] == [("gpu-0", "Healthy"), ("gpu-1", "Unhealthy")]
    assert [n.ID for n in decoded.devices[0].topology.nodes] == [1]


def test_allocation_messages_bytes() -> None:
    preferred = ln(1, ln(1, "a") + ln(1, "b") + ln(2, "a") + vint(3, 2))
    decoded = dp.PreferredAllocationRequest.FromString(preferred)
    request = decoded.container_requests[0]
    assert list(request.available_deviceIDs) == ["a", "b"]
    assert list(request.must_include_deviceIDs) == ["a"]
    assert request.allocation_size == 2
    assert dp.PreferredAllocationResponse.FromString(ln(1, ln(1, "b"))).container_responses[0].deviceIDs == [
        "b"
    ]

    assert dp.AllocateRequest.FromString(ln(1, ln(1, "gpu-0"))).container_requests[0].devices_ids == ["gpu-0"]
    response = (
        ln(1, ln(1, "K") + ln(2, "V"))
        + ln(2, ln(1, "/c") + ln(2, "/h") + vint(3, 1))
        + ln(3, ln(1, "/dev/kfd") + ln(2, "/dev/kfd") + ln(3, "rw"))
        + ln(4, ln(1, "ak") + ln(2, "av"))
        + ln(5, ln(1, "amd.com/gpu=gpu0"))
    )
    container = dp.ContainerAllocateResponse.FromString(response)
    assert dict(container.envs) == {"K": "V"}
    assert (container.mounts[0].host_path, container.mounts[0].read_only) == ("/h", True)
    assert container.devices[0].permissions == "rw"
    assert dict(container.annotations) == {"ak": "av"}
    assert container.cdi_devices[0].name == "amd.com/gpu=gpu0"
    assert dp.PreStartContainerRequest.FromString(ln(1, "gpu-0")).devices_ids == ["gpu-0"]
    assert dp.Empty().SerializeToString() == b""


def test_pod_resources_bytes() -> None:
    devices = ln(1, "amd.com/gpu") + ln(2, "gpu-0") + ln(3, ln(1, vint(1, 0)))
    claim = ln(1, ln(1, "amd.com/gpu=0")) + ln(2, "gpu.amd.com") + ln(3, "pool") + ln(4, "gpu-0") + ln(5, "")
    dynamic = ln(2, "claim") + ln(3, "ns") + ln(4, claim)
    memory = ln(1, "memory") + vint(2, 1 << 33)
    container = ln(1, "main") + ln(2, devices) + vint(3, 7) + ln(4, memory) + ln(5, dynamic)
    pod = ln(1, "pod-a") + ln(2, "default") + ln(3, container)
    decoded = pr.ListPodResourcesResponse.FromString(ln(1, pod)).pod_resources[0]
    assert (decoded.name, decoded.namespace) == ("pod-a", "default")
    got = decoded.containers[0]
    assert (got.devices[0].resource_name, list(got.devices[0].device_ids)) == ("amd.com/gpu", ["gpu-0"])
    assert list(got.cpu_ids) == [7]
    assert got.memory[0].size == 1 << 33
    resource = got.dynamic_resources[0].claim_resources[0]
    assert (resource.driver_name, resource.pool_name, resource.device_name) == (
        "gpu.amd.com",
        "pool",
        "gpu-0",
    )
    # share_id is proto3 `optional`: an explicitly sent empty string is distinguishable from absent.
    assert resource.HasField("share_id")
    assert pr.GetPodResourcesRequest(pod_name="p", pod_namespace="n").SerializeToString() == ln(1, "p") + ln(
        2, "n"
    )
    allocatable = pr.AllocatableResourcesResponse.FromString(ln(1, devices) + vint(2, 3))
    assert list(allocatable.cpu_ids) == [3]


def test_plugin_registration_bytes() -> None:
    info = reg.PluginInfo(
        type="DRAPlugin", name="gpu.amd.com", endpoint="/p/dra.sock", supported_versions=["v1.DRAPlugin"]
    )
    expected = ln(1, "DRAPlugin") + ln(2, "gpu.amd.com") + ln(3, "/p/dra.sock") + ln(4, "v1.DRAPlugin")
    assert info.SerializeToString() == expected
    assert reg.RegistrationStatus(plugin_registered=True, error="x").SerializeToString() == vint(1, 1) + ln(
        2, "x"
    )


def test_dra_bytes() -> None:
    claim = ln(1, "ns") + ln(2, "uid-1") + ln(3, "claim")
    assert dra.Claim(namespace="ns", uid="uid-1", name="claim").SerializeToString() == claim
    device = ln(1, "req") + ln(2, "pool") + ln(3, "gpu-0") + ln(4, "amd.com/gpu=0")
    entry = ln(1, "uid-1") + ln(2, ln(1, device) + ln(2, ""))
    decoded = dra.NodePrepareResourcesResponse.FromString(ln(1, entry))
    assert decoded.claims["uid-1"].devices[0].cdi_device_ids == ["amd.com/gpu=0"]
    unprepared = dra.NodeUnprepareResourcesResponse.FromString(ln(1, ln(1, "uid-1") + ln(2, ln(1, "boom"))))
    assert unprepared.claims["uid-1"].error == "boom"
    assert dra.v1.Device.FromString(device + ln(5, "share")).share_id == "share"


def test_dra_health_bytes() -> None:
    assert drahealth.NodeWatchResourcesRequest().SerializeToString() == b""
    health = (
        ln(1, ln(1, "node-a") + ln(2, "gpu-0"))
        + vint(2, 2)
        + vint(3, 1_760_000_000)
        + vint(4, 30)
        + ln(5, "ras_uncorrectable_increase")
    )
    message = drahealth.NodeWatchResourcesResponse(
        devices=[
            drahealth.DeviceHealth(
                device=drahealth.DeviceIdentifier(pool_name="node-a", device_name="gpu-0"),
                health=drahealth.UNHEALTHY,
                last_updated_time=1_760_000_000,
                health_check_timeout_seconds=30,
                message="ras_uncorrectable_increase",
            )
        ]
    )
    assert message.SerializeToString() == ln(1, health)
    decoded = drahealth.NodeWatchResourcesResponse.FromString(ln(1, health) + ln(1, vint(2, 1)))
    assert [drahealth.status_name(d.health) for d in decoded.devices] == ["Unhealthy", "Healthy"]
    assert decoded.devices[0].device.device_name == "gpu-0"
    # UNKNOWN is the zero value: a device sent without a health reads Unknown, as does a future value.
    assert drahealth.status_name(drahealth.DeviceHealth().health) == "Unknown"
    assert drahealth.status_name(7) == "Unknown"


EXPECTED_PATHS = {
    "/v1beta1.Registration/Register",
    "/v1beta1.DevicePlugin/GetDevicePluginOptions",
    "/v1beta1.DevicePlugin/ListAndWatch",
    "/v1beta1.DevicePlugin/GetPreferredAllocation",
    "/v1beta1.DevicePlugin/Allocate",
    "/v1beta1.DevicePlugin/PreStartContainer",
    "/v1.PodResourcesLister/List",
    "/v1.PodResourcesLister/GetAllocatableResources",
    "/v1.PodResourcesLister/Get",
    "/pluginregistration.Registration/GetInfo",
    "/pluginregistration.Registration/NotifyRegistrationStatus",
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources",
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources",
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources",
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources",
    "/v1alpha1.DRAResourceHealth/NodeWatchResources",
}


class _RecordingHandler(grpc.GenericRpcHandler):
    """Answers nothing (UNIMPLEMENTED) but records the method path each call arrived on."""

    def __init__(self) -> None:
        self.paths: set[str] = set()

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> None:
        self.paths.add(handler_call_details.method)


@pytest.fixture
def recording_channel(tmp_path: Path) -> Iterator[tuple[grpc.Channel, _RecordingHandler]]:
    handler = _RecordingHandler()
    server = serve_unix(tmp_path / "wire.sock", [lambda s: s.add_generic_rpc_handlers((handler,))])
    channel = unix_channel(server.path)
    try:
        yield channel, handler
    finally:
        channel.close()
        server.stop(grace=None)


def test_stubs_call_the_kubelet_method_paths(
    recording_channel: tuple[grpc.Channel, _RecordingHandler],
) -> None:
    channel, handler = recording_channel
    plugin = dp.DevicePluginStub(channel)
    lister = pr.PodResourcesListerStub(channel)
    registration = reg.RegistrationStub(channel)
    calls: list[Callable[[], Any]] = [
        lambda: dp.RegistrationStub(channel).Register(dp.RegisterRequest(), timeout=5),
        lambda: plugin.GetDevicePluginOptions(dp.Empty(), timeout=5),
        lambda: list(plugin.ListAndWatch(dp.Empty(), timeout=5)),
        lambda: plugin.GetPreferredAllocation(dp.PreferredAllocationRequest(), timeout=5),
        lambda: plugin.Allocate(dp.AllocateRequest(), timeout=5),
        lambda: plugin.PreStartContainer(dp.PreStartContainerRequest(), timeout=5),
        lambda: lister.List(pr.ListPodResourcesRequest(), timeout=5),
        lambda: lister.GetAllocatableResources(pr.AllocatableResourcesRequest(), timeout=5),
        lambda: lister.Get(pr.GetPodResourcesRequest(), timeout=5),
        lambda: registration.GetInfo(reg.InfoRequest(), timeout=5),
        lambda: registration.NotifyRegistrationStatus(reg.RegistrationStatus(), timeout=5),
        lambda: dra.DRAPluginStub(channel).NodePrepareResources(dra.NodePrepareResourcesRequest(), timeout=5),
        lambda: dra.DRAPluginStub(channel).NodeUnprepareResources(
            dra.NodeUnprepareResourcesRequest(), timeout=5
        ),
        lambda: dra.v1_grpc.DRAPluginStub(channel).NodePrepareResources(
            dra.v1.NodePrepareResourcesRequest(), timeout=5
        ),
        lambda: dra.v1_grpc.DRAPluginStub(channel).NodeUnprepareResources(
            dra.v1.NodeUnprepareResourcesRequest(), timeout=5
        ),
        lambda: list(
            drahealth.DRAResourceHealthStub(channel).NodeWatchResources(
                drahealth.NodeWatchResourcesRequest(), timeout=5
            )
        ),
    ]
    for call in calls:
        with pytest.raises(grpc.RpcError) as raised:
            call()
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED

    assert handler.paths == EXPECTED_PATHS
