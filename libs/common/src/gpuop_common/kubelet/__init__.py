"""Kubelet gRPC APIs over unix sockets, from project-written protos that are wire-compatible upstream.

Submodules: `deviceplugin` (v1beta1), `podresources` (v1), `pluginregistration`, `dra` (v1beta1, v1),
`drahealth` (the DRA resource health stream, v1alpha1).
The socket helpers below are what every client and server of these APIs needs.
"""

from .sockets import (
    MAX_SOCKET_PATH_BYTES,
    ServicerAdder,
    SocketInUseError,
    SocketPathTooLongError,
    UnixServer,
    check_socket_path,
    dial_unix,
    is_socket,
    remove_stale_socket,
    serve_unix,
    socket_identity,
    unix_channel,
    unix_target,
)

__all__ = [
    "MAX_SOCKET_PATH_BYTES",
    "ServicerAdder",
    "SocketInUseError",
    "SocketPathTooLongError",
    "UnixServer",
    "check_socket_path",
    "dial_unix",
    "is_socket",
    "remove_stale_socket",
    "serve_unix",
    "socket_identity",
    "unix_channel",
    "unix_target",
]
