"""The node's GPUs as the config manager sees them: inventory, plan a profile, apply one target."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gpuop_common.config.config_manager import PartitionProfile
from gpuop_common.gpu import AmdSysfsBackend, GpuBackend, GpuDevice, NvmlBackend, Vendor, open_backends
from gpuop_common.gpu.amd_drm import AMD_VENDOR_ID
from gpuop_common.gpu.amd_reload import DriverReloader, DriverReloadError
from gpuop_common.gpu.detect import pci_gpu_addresses
from gpuop_common.gpu.errors import GpuBackendError
from gpuop_common.gpu.profile_check import GpuTarget, ProfilePlan, gpu_matches, plan_profile
from gpuop_common.gpu.sysfs_write import AttrWriter

RELOAD_WAIT_S = 120.0  # for the GPUs to be back after `modprobe amdgpu`
RELOAD_POLL_S = 1.0


class NodeGpus:
    """Wraps the vendor backends of one host root; every write goes through gpuop_common."""

    def __init__(
        self,
        backends: list[GpuBackend],
        *,
        reopen: Callable[[], list[GpuBackend]] | None = None,
        reloader: DriverReloader | None = None,
        sleep: Callable[[float], None] = time.sleep,
        host_root: Path | str | None = None,
    ) -> None:
        self.backends = backends
        self.host_root = host_root  # for the GPUs on the PCI bus when the driver's files are gone
        self._vendors: list[Vendor] | None = None
        self._reopen = reopen
        self.reloader = reloader  # None: a change that needs a driver reload fails, saying so
        self._sleep = sleep

    @classmethod
    def open(
        cls,
        host_root: Path | str,
        vendor: str = "auto",
        reloader: DriverReloader | None = None,
        amd_writer: AttrWriter | None = None,
    ) -> NodeGpus:
        """`amd_writer`: how AMD partition attributes are written (`amd-smi`); the sysfs files
        when None."""

        def reopen() -> list[GpuBackend]:
            return open_backends(host_root, vendor, amd_writer=amd_writer)

        return cls(reopen(), reopen=reopen, reloader=reloader, host_root=host_root)

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

    def apply(self, target: GpuTarget) -> bool:
        """Write one GPU's target; True when its memory partition waits for a driver reload (the
        rest of its writes come after it). Raises a GpuBackendError naming what the driver refused."""
        backend = self._backend(target.vendor)
        if target.vendor is Vendor.AMD:
            state = backend.set_partition_mode(target.gpu_id, f"{target.compute}_{target.memory}")
            return state.pending_memory is not None
        assert isinstance(backend, NvmlBackend)
        backend.mig_writer(target.gpu_id).apply(bool(target.mig_enabled), dict(target.mig_devices))
        return False

    def reload_amd_driver(self, *, load_only: bool = False) -> None:
        """`modprobe -r amdgpu; modprobe amdgpu` (only the load when resuming one), then wait for
        as many AMD GPUs as before. The backends are reopened: their view of the old driver's
        files is gone. Raises a GpuBackendError when reloading is off, a command fails, or the
        GPUs do not come back."""
        if self.reloader is None or self._reopen is None:
            raise DriverReloadError(
                "a memory partition change takes effect at a driver reload, and reloading the "
                "driver is off (--driver-reload)"
            )
        # As many as now; after a restart mid-reload (module out, no KFD to count) the AMD GPUs on
        # the PCI bus, which stay whether a driver is loaded or not.
        before = self._amd_count()
        if not before and self.host_root is not None:
            before = len(pci_gpu_addresses(self.host_root, AMD_VENDOR_ID))
        self.close()
        try:
            if load_only:
                self.reloader.load()
            else:
                self.reloader.reload()
        finally:
            self.backends = self._reopen()
        waited = 0.0
        while (found := self._amd_count()) < before:
            if waited >= RELOAD_WAIT_S:
                raise DriverReloadError(
                    f"{found} of {before} AMD GPUs back {RELOAD_WAIT_S:g}s after reloading amdgpu"
                )
            self._sleep(RELOAD_POLL_S)
            waited += RELOAD_POLL_S
            self.close()
            self.backends = self._reopen()

    def _amd_count(self) -> int:
        amd = [b for b in self.backends if b.vendor is Vendor.AMD]
        try:
            return sum(len(b.enumerate()) for b in amd)
        except GpuBackendError:
            return 0  # the driver's files are not all back yet


GpuFactory = Callable[[], NodeGpus]
