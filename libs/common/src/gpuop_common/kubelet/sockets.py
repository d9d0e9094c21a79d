"""Plaintext gRPC over unix-domain sockets, the transport of every kubelet API.

Shared by the device plugin, the exporter, the DRA driver and the kubelet emulator so that each of
them checks socket paths, removes stale sockets and shuts servers down the same way.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import grpc

log = logging.getLogger(__name__)

# sockaddr_un.sun_path is 108 bytes on Linux including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107

ServicerAdder = Callable[[grpc.Server], object]
"""Adds one servicer to a server, e.g. `lambda s: add_DevicePluginServicer_to_server(plugin, s)`."""

ChannelOptions = Sequence[tuple[str, str | int]]


class SocketPathTooLongError(ValueError):
    """A unix socket path does not fit into sockaddr_un."""

    def __init__(self, path: Path | str) -> None:
        self.path = str(path)
        size = len(os.fsencode(self.path))
        super().__init__(
            f"unix socket path {self.path!r} is {size} bytes, the limit is {MAX_SOCKET_PATH_BYTES}; "
            "use a shorter directory"
        )


class SocketInUseError(OSError):
    """Something that is not a unix socket occupies the path a server wants to listen on."""


def check_socket_path(path: Path | str) -> Path:
    """Return `path` made absolute, or raise SocketPathTooLongError."""
    absolute = Path(path).absolute()
    if len(os.fsencode(str(absolute))) > MAX_SOCKET_PATH_BYTES:
        raise SocketPathTooLongError(absolute)
    return absolute


def unix_target(path: Path | str) -> str:
    """gRPC target string for a socket path: `unix:///abs/path.sock`."""
    return f"unix://{check_socket_path(path)}"


def is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except FileNotFoundError:
        return False


def socket_identity(path: Path | str) -> tuple[int, int] | None:
    """(inode, ctime ns) of the socket at `path`, None when absent: tells a re-created socket apart.

    The inode alone is not enough: file systems hand a freed inode straight to the next new file.
    """
    try:
        info = Path(path).lstat()
    except FileNotFoundError:
        return None
    return (info.st_ino, info.st_ctime_ns) if stat.S_ISSOCK(info.st_mode) else None


def unix_channel(path: Path | str, options: ChannelOptions = ()) -> grpc.Channel:
    """An insecure channel to a unix socket. Connects lazily, like every gRPC channel."""
    return grpc.insecure_channel(unix_target(path), options=list(options))


def dial_unix(path: Path | str, timeout: float, options: ChannelOptions = ()) -> grpc.Channel:
    """A channel that is already connected, or ConnectionError naming the socket after `timeout`."""
    channel = unix_channel(path, options)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        channel.close()
        raise ConnectionError(f"cannot connect to unix socket {path} within {timeout:g}s") from None
    return channel


@dataclass
class UnixServer:
    """A started gRPC server listening on one unix socket; `stop()` also removes the socket it made."""

    path: Path
    server: grpc.Server
    _executor: ThreadPoolExecutor
    _identity: tuple[int, int] | None
    _stopped: bool = field(default=False, init=False)

    def stop(self, grace: float | None = 0.5) -> None:
        """Stop serving, join the worker threads and delete the socket if it is still ours.

        gRPC core itself unlinks the listening path when the listener closes, whatever now sits
        there, so always stop an old server before listening again on the same path.
        """
        if self._stopped:
            return
        self._stopped = True
        self.server.stop(grace).wait()
        self._executor.shutdown(wait=True, cancel_futures=True)
        # Only remove the file this server created (gRPC normally already has).
        if socket_identity(self.path) == self._identity:
            self.path.unlink(missing_ok=True)

    def socket_exists(self) -> bool:
        """True while the socket this server listens on is still in place (the kubelet may delete it)."""
        return socket_identity(self.path) == self._identity


def remove_stale_socket(path: Path) -> None:
    """Delete a leftover socket at `path`; refuse to delete anything that is not a socket."""
    if is_socket(path):
        log.info("removing stale unix socket %s", path)
        path.unlink()
    elif path.exists() or path.is_symlink():
        raise SocketInUseError(f"{path} exists and is not a unix socket; refusing to replace it")


def serve_unix(
    path: Path | str,
    servicer_adders: Iterable[ServicerAdder],
    *,
    max_workers: int = 8,
    thread_name_prefix: str = "grpc-unix",
    options: ChannelOptions = (),
) -> UnixServer:
    """Listen on `path` (removing a stale socket first), register the servicers and start serving.

    `max_workers` bounds concurrent RPCs, streams included: every open server stream holds a worker.
    """
    socket_path = check_socket_path(path)
    if not socket_path.parent.is_dir():
        raise FileNotFoundError(f"directory for unix socket {socket_path} does not exist")
    remove_stale_socket(socket_path)
    executor = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=thread_name_prefix)
    server = grpc.server(executor, options=list(options))
    for add in servicer_adders:
        add(server)
    try:
        bound = server.add_insecure_port(f"unix://{socket_path}")
    except RuntimeError as exc:
        bound = 0
        reason = str(exc)
    else:
        reason = "gRPC refused the address"
    if not bound:
        executor.shutdown(wait=False)
        raise OSError(f"cannot listen on unix socket {socket_path}: {reason}")
    server.start()
    return UnixServer(
        path=socket_path, server=server, _executor=executor, _identity=socket_identity(socket_path)
    )
