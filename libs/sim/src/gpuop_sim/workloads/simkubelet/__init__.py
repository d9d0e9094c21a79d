"""Simulated kubelets: pods as local processes (`process`) or instantly Running (`stub`)."""

from gpuop_sim.workloads.simkubelet.runtime import DeviceSource, PodsMode, SimKubelets
from gpuop_sim.workloads.simkubelet.worker import NodeRuntime, PodWorker

__all__ = ["DeviceSource", "NodeRuntime", "PodWorker", "PodsMode", "SimKubelets"]
