"""Unix-socket helpers: path limit, stale-socket removal, clean stop."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from gpuop_common.kubelet import (
    MAX_SOCKET_PATH_BYTES,
    SocketInUseError,
    SocketPathTooLongError,
    dial_unix,
    serve_unix,
    unix_channel,
)
from gpuop_common.kubelet import deviceplugin as dp


class _Options(dp.DevicePluginServicer):
    def GetDevicePluginOptions(self, request: dp.Empty, context: object) -> dp.DevicePluginOptions:  # noqa: N802
        return dp.DevicePluginOptions(pre_start_required=True)


def _adder(server: object) -> None:
    dp.add_DevicePluginServicer_to_server(_Options(), server)


def test_too_long_path_names_the_path(tmp_path: Path) -> None:
    long_path = tmp_path / ("x" * MAX_SOCKET_PATH_BYTES)
    with pytest.raises(SocketPathTooLongError, match="x" * 20) as raised:
        serve_unix(long_path, [_adder])
    assert raised.value.path == str(long_path)
    with pytest.raises(SocketPathTooLongError):
        unix_channel(long_path)


def test_stale_socket_is_replaced_and_removed_on_stop(tmp_path: Path) -> None:
    path = tmp_path / "plugin.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))
    stale.close()  # leaves the socket file behind, like a crashed plugin

    server = serve_unix(path, [_adder], thread_name_prefix="sock-test")
    channel = dial_unix(path, timeout=5)
    try:
        assert dp.DevicePluginStub(channel).GetDevicePluginOptions(dp.Empty(), timeout=5).pre_start_required
    finally:
        channel.close()
        server.stop()

    assert not path.exists()
    assert not [t for t in threading.enumerate() if t.name.startswith("sock-test")]


def test_refuses_to_replace_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "kubelet_internal_checkpoint"
    path.write_text("{}")
    with pytest.raises(SocketInUseError, match="kubelet_internal_checkpoint"):
        serve_unix(path, [_adder])
    assert path.read_text() == "{}"


def test_server_notices_its_socket_was_deleted_and_can_serve_again(tmp_path: Path) -> None:
    path = tmp_path / "plugin.sock"
    first = serve_unix(path, [_adder])
    assert first.socket_exists()
    path.unlink()  # the kubelet wipes the device-plugins dir when it restarts
    assert not first.socket_exists()
    first.stop()
    second = serve_unix(path, [_adder])
    channel = dial_unix(path, timeout=5)
    try:
        assert dp.DevicePluginStub(channel).GetDevicePluginOptions(dp.Empty(), timeout=5).pre_start_required
    finally:
        channel.close()
        second.stop()
    assert not path.exists()


def test_dial_missing_socket_times_out_with_path(tmp_path: Path) -> None:
    with pytest.raises(ConnectionError, match=r"missing\.sock"):
        dial_unix(tmp_path / "missing.sock", timeout=0.2)
