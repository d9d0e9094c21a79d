"""Kubelet emulator: the kubelet's gRPC APIs on real unix sockets, for tests and the simulated cluster.

with KubeletEmulator(tmp_root) as kubelet:
    ...start a device plugin against kubelet.socket_dir...
    kubelet.wait_for(lambda: kubelet.allocatable().get("amd.com/gpu") == 8)
    kubelet.allocate("amd.com/gpu", 1, pod="p", namespace="default")
"""

from .devicemanager import Allocation
from .dra import DraClaim, PreparedClaim, PreparedDevice, PrepareResult
from .drahealth import DraDeviceHealth
from .emulator import ChangeCallback, KubeletEmulator
from .pluginwatcher import RegisteredPlugin
from .podresources import ContainerAssignment, PodAssignment
from .state import AllocationError, DeviceInfo, DeviceSnapshot, DraError, KubeletEmulatorError

__all__ = [
    "Allocation",
    "AllocationError",
    "ChangeCallback",
    "ContainerAssignment",
    "DeviceInfo",
    "DeviceSnapshot",
    "DraClaim",
    "DraDeviceHealth",
    "DraError",
    "KubeletEmulator",
    "KubeletEmulatorError",
    "PodAssignment",
    "PrepareResult",
    "PreparedClaim",
    "PreparedDevice",
    "RegisteredPlugin",
]
