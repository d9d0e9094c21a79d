"""The node's GPUs as the config manager sees them: inventory, plan a profile, apply one target."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from gpuop_common.config.config_manager import PartitionProfile
from gpuop_common.gpu import AmdSysfsBackend, GpuBackend, GpuDevice, NvmlBackend, Vendor, open_backends
from gpuop_common.gpu.errors import GpuBackendError
from gpuop_common.gpu.profile_check import GpuTarget, ProfilePlan, gpu_matches, plan_profile


class NodeGpus:
    """Wraps the vendor backends of one host root; every write goes through gpuop_common."""

    def __init__(self, backends: list[GpuBackend]) -> None:
        self.backends = backends
        self._vendors: list[Vendor] | None = None

    @classmethod
    def open(cls, host_root: Path | str, vendor: str = "auto") -> NodeGpus:
        return cls(open_backends(host_root, vendor))

    def close(self) -> None:
        for backend in self.backends:
            backend.close()

    def _backend(self, vendor: Vendor) -> GpuBackend:
        for backend in self.backends:
            if backend.vendor is vendor:
                return backend
        raise GpuBackendError(f"no {vendor.value} backend on this node")

    def inventory(self) -> list[GpuDevice]:
        return [gpu for backend in self.backends for gpu in backend.enumerate()]

    def vendors(self) -> list[Vendor]:
        """Vendors with GPUs on the node (read once: repartitioning does not change them)."""
        if self._vendors is None:
            self._vendors = sorted({gpu.vendor for gpu in self.inventory()})
        return self._vendors

    def plan(self, profile: PartitionProfile) -> ProfilePlan:
        gpus = self.inventory()
        xcc: dict[str, int | None] = {}
        for backend in self.backends:
            if isinstance(backend, AmdSysfsBackend):
                xcc |= backend.xcc_counts()
        return plan_profile(profile, gpus, xcc)

    def _mig_layout(self, gpu: GpuDevice) -> dict[str, int] | None:
        if gpu.vendor is not Vendor.NVIDIA:
            return None
        backend = self._backend(Vendor.NVIDIA)
        assert isinstance(backend, NvmlBackend)
        return dict(backend.mig_writer(gpu.id).layout())

    def pending(self, plan: ProfilePlan) -> list[GpuTarget]:
        """The plan's targets that the GPUs do not match yet."""
        by_id = {gpu.id: gpu for gpu in self.inventory()}
        todo: list[GpuTarget] = []
        for target in plan.targets:
            gpu = by_id.get(target.gpu_id)
            if gpu is None or not gpu_matches(target, gpu, self._mig_layout(gpu)):
                todo.append(target)
        return todo

    def describe(self, targets: list[GpuTarget]) -> list[str]:
        """What each target's GPU is now, e.g. `SPX/NPS1` or `MIG off` (one inventory read)."""
        inventory = self.inventory()
        return [self._describe(t, inventory) for t in targets]

    def _describe(self, target: GpuTarget, inventory: list[GpuDevice]) -> str:
        gpu = next((g for g in inventory if g.id == target.gpu_id), None)
        if gpu is None:
            return "gone"
        if target.vendor is Vendor.AMD:
            state = gpu.partition
            return f"{state.compute}/{state.memory}" if state else "not partitionable"
        layout = self._mig_layout(gpu) or {}
        if gpu.partition is None or gpu.partition.compute != "mig":
            return "MIG off"
        return "MIG " + "+".join(f"{n}x{p}" for p, n in sorted(layout.items()))

    def apply(self, target: GpuTarget) -> None:
        """Write one GPU's target; raises a GpuBackendError naming what the driver refused."""
        backend = self._backend(target.vendor)
        if target.vendor is Vendor.AMD:
            backend.set_partition_mode(target.gpu_id, f"{target.compute}_{target.memory}")
            return
        assert isinstance(backend, NvmlBackend)
        backend.mig_writer(target.gpu_id).apply(bool(target.mig_enabled), dict(target.mig_devices))


GpuFactory = Callable[[], NodeGpus]
