"""The DRA resource health stream: the pure rules, the feed, and the stream through the kubelet emulator.

The end-to-end tests run the driver's real loop against the kubelet emulator over unix sockets,
break GPUs with the simulator's fault helpers and heal them with the fake `amd-smi`/`nvidia-smi`
reset, and read what the kubelet would write into a pod's allocatedResourcesStatus.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import grpc
import pytest
from gpuop_common.gpu import GpuHealth, HealthReason, PartitionHealth, Vendor, open_backends
from gpuop_common.kubejson import RESOURCESLICES, KubeJson
from gpuop_common.kubelet import dial_unix, dra, drahealth
from gpuop_common.kubelet import pluginregistration as reg
from gpuop_dra_driver import DRIVER_NAME
from gpuop_dra_driver.devices import build_devices
from gpuop_dra_driver.health import (
    HEALTH_UNREADABLE,
    NOT_REPORTED,
    DeviceHealthState,
    Health,
    device_health,
    healthy_devices,
    known_gpus,
)
from gpuop_dra_driver.healthfeed import HealthFeed, HealthReport, health_timeout_s
from gpuop_dra_driver.server import MAX_HEALTH_STREAMS, health_response
from gpuop_sim import hostfakes
from gpuop_sim.kubelet import DraDeviceHealth, KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo
from gpuop_sim.nodes.faults import break_gpu
from gpuop_sim.waiting import wait_until

NODE = "gpu-node-1"  # conftest's node
MakeRoot = Callable[..., NodeRootInfo]
StartDriver = Callable[..., Any]  # conftest.run_driver -> DriverHandle
Claims = Any  # conftest.ClaimFactory
Handle = Any
RAS = "ras_uncorrectable_increase"


def backends_of(info: NodeRootInfo, monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in info.env.items():
        monkeypatch.setenv(key, value)
    return open_backends(info.root)


# --- the pure rules ---------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", ["amd-mi300x-cpx", "nvidia-h100x8-mig"])
def test_a_reason_on_a_gpu_marks_all_of_its_devices_one_on_a_partition_only_that_one(
    profile: str, gpu_node_root: MakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    backends = backends_of(gpu_node_root(profile), monkeypatch)
    gpus = [g for b in backends for g in b.enumerate()]
    reports = [r for b in backends for r in b.health()]
    every = [d.name for d in build_devices(gpus)]

    states = device_health(gpus, reports)
    assert [s.device for s in states] == every
    assert {s.health for s in states} == {Health.HEALTHY} and {s.message for s in states} == {""}
    assert [d.name for d in healthy_devices(gpus, states)] == every

    bad = HealthReason(RAS, "RAS block umc: uncorrectable errors rose from 0 to 1")
    gpu = gpus[1]
    broken = [dataclasses.replace(r, reasons=(bad, bad)) if r.gpu_id == gpu.id else r for r in reports]
    states = device_health(gpus, broken)
    on_gpu = {d.name for d in build_devices([gpu])}
    assert len(on_gpu) > 1  # the GPU is partitioned: the reason reaches every partition
    assert {s.device: s.reasons for s in states if s.health is Health.UNHEALTHY} == {
        name: (RAS,)
        for name in on_gpu  # each code once
    }
    assert {d.name for d in healthy_devices(gpus, states)} == set(every) - on_gpu

    part = next(d for d in build_devices([gpu]) if d.uid != gpu.id)
    lost = HealthReason("kfd_node_vanished", "partition has no KFD node")
    one = [
        dataclasses.replace(r, partitions=(PartitionHealth(part.uid, (lost,)),)) if r.gpu_id == gpu.id else r
        for r in reports
    ]
    states = device_health(gpus, one)
    assert [(s.device, s.health, s.message) for s in states if s.health is not Health.HEALTHY] == [
        (part.name, Health.UNHEALTHY, "kfd_node_vanished")
    ]


def test_unreadable_or_unreported_health_is_unknown_and_not_published(
    gpu_node_root: MakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    backends = backends_of(gpu_node_root("amd-mi210x8"), monkeypatch)
    gpus = [g for b in backends for g in b.enumerate()]
    reports = [r for b in backends for r in b.health()]

    failed = device_health(gpus, [], {str(Vendor.AMD)})
    assert {(s.health, s.reasons) for s in failed} == {(Health.UNKNOWN, (HEALTH_UNREADABLE,))}
    assert healthy_devices(gpus, failed) == []

    unreported = device_health(gpus, reports[1:])
    missing = {d.name for d in build_devices(gpus) if d.gpu_id == reports[0].gpu_id}
    assert {s.device: (s.health, s.reasons) for s in unreported if s.health is not Health.HEALTHY} == {
        name: (Health.UNKNOWN, (NOT_REPORTED,)) for name in missing
    }
    assert {d.name for d in healthy_devices(gpus, unreported)} == {s.device for s in unreported} - missing


def test_a_vanished_gpu_stays_known_while_its_backend_reports_it(
    gpu_node_root: MakeRoot, monkeypatch: pytest.MonkeyPatch
) -> None:
    backends = backends_of(gpu_node_root("amd-mi210x8"), monkeypatch)
    gpus = [g for b in backends for g in b.enumerate()]
    gone = HealthReason("gpu_vanished", "GPU has neither a DRM card nor a KFD node any more")
    reports = [GpuHealth(g.id, (gone,) if g is gpus[0] else ()) for g in gpus]

    known = known_gpus(gpus, gpus[1:], reports)
    assert known == gpus
    states = device_health(known, reports)
    assert states[0].health is Health.UNHEALTHY and states[0].message == "gpu_vanished"
    assert [d.name for d in healthy_devices(gpus[1:], states)] == [s.device for s in states[1:]]

    # A re-taken baseline no longer names it: it is gone from the stream too.
    assert known_gpus(known, gpus[1:], reports[1:]) == gpus[1:]
    # While its vendor's health cannot be read, nobody can say: it stays, as Unknown.
    assert known_gpus(known, gpus[1:], [], {str(Vendor.AMD)}) == gpus


def states(*entries: tuple[str, Health, tuple[str, ...]]) -> list[DeviceHealthState]:
    return [DeviceHealthState(name, health, reasons) for name, health, reasons in entries]


def test_the_feed_counts_changes_and_keeps_each_device_s_last_change_time() -> None:
    now = [1_000.0]
    feed = HealthFeed(30, clock=lambda: now[0])
    assert feed.update(states(("a", Health.HEALTHY, ()), ("b", Health.HEALTHY, ())))
    now[0] = 1_010.0
    assert not feed.update(states(("a", Health.HEALTHY, ()), ("b", Health.HEALTHY, ())))
    now[0] = 1_020.0
    assert feed.update(states(("a", Health.HEALTHY, ()), ("b", Health.UNHEALTHY, (RAS,))))
    now[0] = 1_030.0
    assert feed.update(states(("a", Health.HEALTHY, ()), ("b", Health.UNHEALTHY, (RAS, "x"))))
    report = feed.current()
    assert report.version == 3
    assert [(d.state.device, d.since) for d in report.devices] == [("a", 1_000), ("b", 1_030)]

    message = health_response(report, NODE, feed.timeout_s)
    assert [
        (d.device.pool_name, d.device.device_name, d.health, d.message, d.last_updated_time)
        for d in message.devices
    ] == [
        (NODE, "a", drahealth.HEALTHY, "", 1_000),
        (NODE, "b", drahealth.UNHEALTHY, f"{RAS}, x", 1_030),
    ]
    assert {d.health_check_timeout_seconds for d in message.devices} == {30}
    long = HealthReport(
        1, (dataclasses.replace(report.devices[1], state=states(("c", Health.UNKNOWN, ("y" * 2000,)))[0]),)
    )
    (only,) = health_response(long, NODE, 30).devices
    assert only.health == drahealth.UNKNOWN and len(only.message) == drahealth.MAX_MESSAGE_CHARS


def test_the_reported_timeout_is_thirty_polls_in_whole_seconds() -> None:
    assert health_timeout_s(1.0) == 30
    assert health_timeout_s(0.1) == 3
    assert health_timeout_s(0.25) == 8
    assert health_timeout_s(0.01) == 1


def test_a_watch_sends_at_once_on_change_and_resends_only_after_a_pass() -> None:
    feed = HealthFeed(1)  # resend after a third of a second without change
    feed.update(states(("a", Health.HEALTHY, ())))
    active = threading.Event()
    active.set()
    watch = feed.watch(active.is_set)
    assert next(watch).version == 1
    unhealthy = states(("a", Health.UNHEALTHY, (RAS,)))
    feed.update(unhealthy)
    assert next(watch).version == 2  # a change goes out without waiting

    got: list[tuple[float, int]] = []
    reader = threading.Thread(
        target=lambda: got.extend((time.monotonic(), r.version) for r in watch), daemon=True
    )
    reader.start()
    # No pass runs: nothing is resent, however long it takes (a stalled loop lets the kubelet's
    # timeout turn the devices Unknown, which is then the truth).
    reader.join(timeout=3 * feed.resend_after)
    assert got == []
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        feed.update(unhealthy)  # passes without a change
        time.sleep(0.01)
    (first, v1), (second, v2) = got[:2]
    assert (v1, v2) == (2, 2)
    assert second - first >= 0.9 * feed.resend_after  # with passes running, one resend per period
    active.clear()
    feed.wake()
    reader.join(timeout=5)
    assert not reader.is_alive()  # the client left: the stream ended


# --- through the kubelet emulator -------------------------------------------------------------------


def stream_health(kubelet: KubeletEmulator) -> dict[str, DraDeviceHealth]:
    """Device name -> health, as the kubelet last heard it from the driver's health stream."""
    found = kubelet.dra_device_health(DRIVER_NAME)
    assert {pool for pool, _ in found} <= {NODE}
    return {device: health for (_, device), health in found.items()}


def published(kube: KubeJson) -> list[str]:
    slices, _ = kube.list(RESOURCESLICES)
    return sorted(
        d["name"] for s in slices if s["spec"]["driver"] == DRIVER_NAME for d in s["spec"]["devices"]
    )


def allocated(device: str) -> dict[str, str]:
    """The allocation result naming one of this node's devices."""
    return {"request": "gpu", "driver": DRIVER_NAME, "pool": NODE, "device": device}


def on_gpu(handle: Handle, pci: str) -> set[str]:
    return {s.device for s in handle.service.inventory.health() if s.device.startswith(gpu_prefix(pci))}


def gpu_prefix(pci: str) -> str:
    return "gpu-" + pci.replace(":", "-").replace(".", "-")


def reset(info: NodeRootInfo, pci: str) -> None:
    """The node's own reset tool, as a remediation would run it (the fake ends the GPU's faults)."""
    tool = (
        ["nvidia-smi", "-r", "-i", pci]
        if info.vendor is Vendor.NVIDIA
        else ["amd-smi", "reset", "-G", "-g", pci]
    )
    assert hostfakes.main(["--root", str(info.root), *tool]) == 0


@contextmanager
def health_stream(handle: Handle) -> Iterator[grpc.CallIterator[drahealth.NodeWatchResourcesResponse]]:
    """A NodeWatchResources of our own on the driver's service socket, cancelled on the way out."""
    channel = dial_unix(handle.sockets.service_socket, timeout=5)
    call = drahealth.DRAResourceHealthStub(channel).NodeWatchResources(drahealth.NodeWatchResourcesRequest())
    try:
        yield call
    finally:
        call.cancel()
        channel.close()


def test_the_driver_registers_the_health_service_and_first_lists_every_published_device_healthy(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator, kube: KubeJson
) -> None:
    started = int(time.time())
    handle = run_driver(gpu_node_root("amd-mi300x-cpx"))
    kubelet_emulator.wait_for(lambda: handle.sockets.registered, timeout=15)
    assert kubelet_emulator.dra_drivers() == {DRIVER_NAME: dra.SERVICE_V1}
    (plugin,) = [p for p in kubelet_emulator.registered_plugins() if p.type == reg.DRA_PLUGIN]
    assert drahealth.SERVICE in plugin.supported_versions
    wait_until(lambda: len(published(kube)) == 63)

    with health_stream(handle) as call:
        first = next(call)
    assert sorted(d.device.device_name for d in first.devices) == published(kube)
    assert {(d.device.pool_name, d.health, d.message) for d in first.devices} == {
        (NODE, drahealth.HEALTHY, "")
    }
    assert {d.health_check_timeout_seconds for d in first.devices} == {health_timeout_s(0.1)}
    assert all(started <= d.last_updated_time <= time.time() for d in first.devices)

    # The emulator opened the stream on its own because the registration lists the service.
    kubelet_emulator.wait_for(lambda: len(stream_health(kubelet_emulator)) == 63, timeout=15)
    assert sorted(stream_health(kubelet_emulator)) == published(kube)
    assert {h.health for h in stream_health(kubelet_emulator).values()} == {"Healthy"}


@pytest.mark.parametrize("profile", ["amd-mi300x-cpx", "amd-mi210x8"])
def test_a_broken_gpu_reports_unhealthy_and_after_a_reset_the_restarted_driver_heals_it(  # noqa: PLR0917
    profile: str,
    gpu_node_root: MakeRoot,
    run_driver: StartDriver,
    kubelet_emulator: KubeletEmulator,
    claims: Claims,
    kube: KubeJson,
) -> None:
    info = gpu_node_root(profile)
    handle = run_driver(info)
    kubelet_emulator.wait_for(
        lambda: len(stream_health(kubelet_emulator)) == len(handle.service.inventory.health()), timeout=15
    )
    pci = info.pci_addresses[1]
    broken = on_gpu(handle, pci)
    assert len(broken) == (8 if profile == "amd-mi300x-cpx" else 1)
    held = sorted(broken)[0]
    claim = claims.make([allocated(held)])
    assert kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid].error == ""
    assert kubelet_emulator.dra_claim_health(claim.uid)[(NODE, held)].health == "Healthy"
    before = stream_health(kubelet_emulator)
    broke_at = int(time.time())

    break_gpu(info.root, pci)

    def reports_broken() -> bool:
        now = stream_health(kubelet_emulator)
        return {n for n, h in now.items() if h.health == "Unhealthy"} == broken

    kubelet_emulator.wait_for(reports_broken, timeout=15)
    now = stream_health(kubelet_emulator)
    assert {now[n].message for n in broken} == {RAS}
    assert all(now[n].last_updated_time >= broke_at for n in broken)
    # The others did not change, nor did their last change time.
    assert {n: h for n, h in now.items() if n not in broken} == {
        n: h for n, h in before.items() if n not in broken
    }
    # The pod holding a device of that GPU sees it in its status; the slice no longer offers them.
    assert kubelet_emulator.dra_claim_health(claim.uid)[(NODE, held)].health == "Unhealthy"
    wait_until(lambda: not broken & set(published(kube)))

    reset(info, pci)

    # amdgpu keeps its RAS counts across a GPU reset (a driver reload or a boot clears them), so the
    # running driver still sees the rise over its baseline. Remediation pauses the node's operands
    # around the reset (issue 22); the driver that comes back takes the counts it finds as its
    # baseline, and the GPU is healthy again.
    assert not broken & {d.name for d in handle.service.inventory.refresh()}
    handle.stop()
    handle = run_driver(info)

    kubelet_emulator.wait_for(
        lambda: {h.health for h in stream_health(kubelet_emulator).values()} == {"Healthy"}, timeout=15
    )
    assert kubelet_emulator.dra_claim_health(claim.uid)[(NODE, held)].health == "Healthy"
    wait_until(lambda: broken <= set(published(kube)))


@pytest.mark.parametrize("profile", ["amd-mi210x8", "nvidia-h100x8"])
def test_a_vanished_gpu_stays_in_the_stream_as_unhealthy_until_it_comes_back(
    profile: str, gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator
) -> None:
    info = gpu_node_root(profile)
    handle = run_driver(info, publish=False)
    kubelet_emulator.wait_for(lambda: len(stream_health(kubelet_emulator)) == 8, timeout=15)
    pci = info.pci_addresses[2]
    (lost,) = on_gpu(handle, pci)

    break_gpu(info.root, pci, "vanished")
    handle.service.wake()

    kubelet_emulator.wait_for(lambda: stream_health(kubelet_emulator)[lost].health == "Unhealthy", timeout=15)
    assert len(stream_health(kubelet_emulator)) == 8
    assert stream_health(kubelet_emulator)[lost].message in {"gpu_vanished", "device_lost"}
    assert lost not in handle.service.inventory.devices()  # not allocatable meanwhile

    reset(info, pci)
    handle.service.wake()

    kubelet_emulator.wait_for(lambda: stream_health(kubelet_emulator)[lost].health == "Healthy", timeout=15)
    wait_until(lambda: lost in handle.service.inventory.devices())


def test_clients_that_leave_do_not_break_the_driver(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator, claims: Claims
) -> None:
    info = gpu_node_root("amd-mi210x8")
    handle = run_driver(info, publish=False)
    kubelet_emulator.wait_for(lambda: len(stream_health(kubelet_emulator)) == 8, timeout=15)

    # More clients come and go than the driver keeps streams for: every one that left freed its slot.
    for _ in range(2 * MAX_HEALTH_STREAMS):
        with health_stream(handle) as call:
            assert len(next(call).devices) == 8
    channel = dial_unix(handle.sockets.service_socket, timeout=5)
    abandoned = drahealth.DRAResourceHealthStub(channel).NodeWatchResources(
        drahealth.NodeWatchResourcesRequest()
    )
    assert len(next(abandoned).devices) == 8
    channel.close()  # gone without a cancel
    wait_until(lambda: handle.sockets.health_service.open_streams == 1)  # the kubelet's alone

    # Streams beyond the cap are refused; the kubelet's keeps working and claims are still prepared.
    with contextlib.ExitStack() as stack:
        held = [stack.enter_context(health_stream(handle)) for _ in range(MAX_HEALTH_STREAMS - 1)]
        for call in held:
            next(call)
        with health_stream(handle) as refused, pytest.raises(grpc.RpcError) as raised:
            next(refused)
        assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        claim = claims.make([allocated(sorted(stream_health(kubelet_emulator))[0])])
        assert kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid].error == ""
    wait_until(lambda: handle.sockets.health_service.open_streams == 1)  # every slot came back

    # The kubelet's own stream lived through all of it.
    pci = info.pci_addresses[0]
    (device,) = on_gpu(handle, pci)
    break_gpu(info.root, pci)
    kubelet_emulator.wait_for(
        lambda: stream_health(kubelet_emulator)[device].health == "Unhealthy", timeout=15
    )


def test_a_stopping_driver_ends_the_stream_and_the_kubelet_forgets_its_health(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator
) -> None:
    handle = run_driver(gpu_node_root("amd-single"), publish=False)
    kubelet_emulator.wait_for(lambda: len(stream_health(kubelet_emulator)) == 1, timeout=15)
    with health_stream(handle) as call:
        next(call)
        started = time.monotonic()
        handle.stop()
        assert time.monotonic() - started < 5  # open streams do not hold the shutdown up
        with pytest.raises(grpc.RpcError):
            next(call)
    kubelet_emulator.wait_for(lambda: stream_health(kubelet_emulator) == {}, timeout=15)
