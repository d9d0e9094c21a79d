"""Pure kubelet rules used by the emulator: registration checks, device selection, counts, rate limit."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_sim.kubelet import AllocationError, DeviceInfo, DeviceSnapshot, KubeletEmulator
from gpuop_sim.kubelet.podresources import TokenBucket
from gpuop_sim.kubelet.state import choose_devices, explicit_devices_error, register_request_error


@pytest.fixture
def socket_dir(short_tmp_dir: Path) -> Path:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(short_tmp_dir / "plugin.sock"))
    listener.close()
    (short_tmp_dir / "plain-file").write_text("")
    return short_tmp_dir


def test_register_request_checks(socket_dir: Path) -> None:
    assert register_request_error("v1beta1", "amd.com/gpu", "plugin.sock", socket_dir) is None
    assert "not supported" in (register_request_error("v1", "amd.com/gpu", "plugin.sock", socket_dir) or "")
    assert "invalid extended resource name" in (
        register_request_error("v1beta1", "gpu", "plugin.sock", socket_dir) or ""
    )
    assert "does not exist" in (
        register_request_error("v1beta1", "amd.com/gpu", "nope.sock", socket_dir) or ""
    )
    assert "not a unix socket" in (
        register_request_error("v1beta1", "amd.com/gpu", "plain-file", socket_dir) or ""
    )
    assert "invalid endpoint" in (register_request_error("v1beta1", "amd.com/gpu", "", socket_dir) or "")


def test_choose_devices_uses_valid_preferences_then_fills() -> None:
    available = ["a", "b", "c", "d"]
    assert choose_devices(available, 2, ["d", "c"]) == ["d", "c"]
    assert choose_devices(available, 3, ["x", "c", "c"]) == ["c", "a", "b"]
    assert choose_devices(available, 1) == ["a"]
    with pytest.raises(AllocationError, match="only 4 are available"):
        choose_devices(available, 5)
    with pytest.raises(AllocationError, match="at least 1"):
        choose_devices(available, 0)


def test_explicit_devices_checks() -> None:
    devices = {"a": DeviceInfo("a", dp.HEALTHY), "b": DeviceInfo("b", "Broken")}
    assert explicit_devices_error("r/x", ["a"], devices, set()) is None
    assert "already allocated" in (explicit_devices_error("r/x", ["a"], devices, {"a"}) or "")
    assert "'Broken', not Healthy" in (explicit_devices_error("r/x", ["b"], devices, set()) or "")
    assert "not a r/x device" in (explicit_devices_error("r/x", ["z"], devices, set()) or "")
    assert "duplicate" in (explicit_devices_error("r/x", ["a", "a"], devices, set()) or "")


def test_snapshot_counts_any_non_healthy_string_as_unhealthy() -> None:
    snapshot = DeviceSnapshot(
        {"r/x": {"a": DeviceInfo("a", dp.HEALTHY), "b": DeviceInfo("b", "healthy"), "c": DeviceInfo("c", "")}}
    )
    assert snapshot.capacity() == {"r/x": 3}
    assert snapshot.allocatable() == {"r/x": 1}


def test_token_bucket_refills_at_qps() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10, burst=2, clock=lambda: now[0])
    assert [bucket.allow() for _ in range(3)] == [True, True, False]
    now[0] += 0.1
    assert [bucket.allow() for _ in range(2)] == [True, False]
    with pytest.raises(ValueError, match="qps"):
        TokenBucket(qps=0, burst=1)


def test_emulator_can_start_again_after_stop(short_tmp_dir: Path) -> None:
    kubelet = KubeletEmulator(short_tmp_dir)
    kubelet.start()
    kubelet.stop()
    assert not kubelet.kubelet_socket.exists()
    with kubelet:
        assert kubelet.kubelet_socket.exists()
        assert kubelet.resources() == {}


def test_start_failure_leaves_nothing_listening(short_tmp_dir: Path) -> None:
    kubelet = KubeletEmulator(short_tmp_dir)
    kubelet.socket_dir.mkdir(parents=True)
    kubelet.kubelet_socket.mkdir()  # a directory where kubelet.sock should go
    with pytest.raises(OSError, match=r"kubelet\.sock"):
        kubelet.start()
    assert not kubelet.pod_resources_socket.exists()
    kubelet.stop()  # harmless: it never ran
