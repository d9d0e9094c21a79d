"""Device health: the pure rules the ResourceSlice and the kubelet's health stream share."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
from gpuop_common.gpu import GpuHealth, HealthReason, PartitionHealth, Vendor, open_backends
from gpuop_dra_driver.devices import build_devices
from gpuop_dra_driver.health import (
    HEALTH_UNREADABLE,
    NOT_REPORTED,
    Health,
    device_health,
    healthy_devices,
    known_gpus,
)
from gpuop_sim.nodes import NodeRootInfo

MakeRoot = Callable[..., NodeRootInfo]
RAS = "ras_uncorrectable_increase"


def backends_of(info: NodeRootInfo, monkeypatch: pytest.MonkeyPatch) -> Any:
    for key, value in info.env.items():
        monkeypatch.setenv(key, value)
    return open_backends(info.root)


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
