"""NVIDIA inventory over NVML: one GpuDevice per physical GPU, MIG devices, NVLink/PCIe peers."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuop_common.gpu import nvml_calls as nc
from gpuop_common.gpu.models import GpuDevice, GpuLink, LinkType, MigDevice, PartitionState, PciIds, Vendor
from gpuop_common.gpu.sysfs import parse_hex, parse_int, read_optional

log = logging.getLogger(__name__)

CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
MIG_MINORS = Path("proc/driver/nvidia-caps/mig-minors")
NVML_DEVICE_MIG_ENABLE = 1
MAX_NVLINKS = 18  # Hopper; the module's NVML_NVLINK_MAX_LINKS bounds the probe when larger


@dataclass(frozen=True, slots=True)
class NvidiaGpuHandle:
    index: int
    handle: Any
    uuid: str


class NvmlInventory:
    """Reads inventory facts through the NVML module; `q` returns None for unsupported queries."""

    def __init__(self, nvml: Any, root: Path) -> None:
        self.nvml = nvml
        self.root = root

    def q(self, fn_name: str, *args: Any) -> Any | None:
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            if nc.error_code(exc) not in (nc.ERROR_NOT_SUPPORTED, nc.ERROR_FUNCTION_NOT_FOUND):
                log.warning("NVML %s failed: %s", fn_name, exc)
            return None

    def handles(self) -> list[NvidiaGpuHandle]:
        result: list[NvidiaGpuHandle] = []
        try:
            count = int(self.nvml.nvmlDeviceGetCount())
        except self.nvml.NVMLError as exc:
            log.warning("NVML cannot count GPUs: %s", exc)
            return result
        for index in range(count):
            try:
                handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
                uuid = nc.text(self.nvml.nvmlDeviceGetUUID(handle))
            except self.nvml.NVMLError as exc:
                log.warning("NVIDIA GPU index %d unusable: %s", index, exc)
                continue
            result.append(NvidiaGpuHandle(index, handle, uuid))
        return result

    def _mig_minors(self) -> dict[str, int]:
        raw = read_optional(self.root / MIG_MINORS, str)
        minors: dict[str, int] = {}
        for line in (raw or "").splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[1].isdigit():
                minors[parts[0]] = int(parts[1])
        return minors

    def partition_state(self, handle: Any) -> PartitionState | None:
        modes = self.q("nvmlDeviceGetMigMode", handle)
        if modes is None:
            return None
        current, pending = (int(m) for m in modes)
        return PartitionState(
            compute="mig" if current == NVML_DEVICE_MIG_ENABLE else "none",
            memory=None,
            available_compute=("none", "mig"),
            pending_compute="mig" if pending == NVML_DEVICE_MIG_ENABLE else "none",
        )

    def mig_devices(
        self, handle: Any, minor: int | None, parent_nodes: tuple[str, ...]
    ) -> tuple[MigDevice, ...]:
        count = self.q("nvmlDeviceGetMaxMigDeviceCount", handle) or 0
        caps = self._mig_minors()
        devices: list[MigDevice] = []
        for slot in range(int(count)):
            try:
                mig = self.nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except self.nvml.NVMLError:
                continue  # empty slot: NVML_ERROR_NOT_FOUND
            uuid = nc.text(self.q("nvmlDeviceGetUUID", mig) or "")
            gi = self.q("nvmlDeviceGetGpuInstanceId", mig)
            ci = self.q("nvmlDeviceGetComputeInstanceId", mig)
            memory = self.q("nvmlDeviceGetMemoryInfo", mig)
            name = nc.text(self.q("nvmlDeviceGetName", mig) or "")
            nodes = list(parent_nodes)
            for key in (f"gpu{minor}/gi{gi}/access", f"gpu{minor}/gi{gi}/ci{ci}/access"):
                if key in caps:
                    nodes.append(f"/dev/nvidia-caps/nvidia-cap{caps[key]}")
            devices.append(
                MigDevice(
                    uuid=uuid,
                    index=slot,
                    profile=nc.mig_profile(name, self.q("nvmlDeviceGetAttributes", mig)),
                    memory_bytes=int(memory.total) if memory is not None else None,
                    gpu_instance_id=int(gi) if gi is not None else None,
                    compute_instance_id=int(ci) if ci is not None else None,
                    device_nodes=tuple(nodes),
                )
            )
        return tuple(devices)

    def active_nvlinks(self, handle: Any) -> int:
        limit = int(getattr(self.nvml, "NVML_NVLINK_MAX_LINKS", MAX_NVLINKS))
        active = 0
        for link in range(limit):
            try:
                if int(self.nvml.nvmlDeviceGetNvLinkState(handle, link)) == 1:
                    active += 1
            except self.nvml.NVMLError:
                break  # links past the device's count answer INVALID_ARGUMENT / NOT_SUPPORTED
        return active

    def links(self, gpus: list[NvidiaGpuHandle]) -> dict[str, tuple[GpuLink, ...]]:
        nvlink_index = int(getattr(self.nvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2))
        ok = int(getattr(self.nvml, "NVML_P2P_STATUS_OK", 0))
        active = {g.uuid: self.active_nvlinks(g.handle) for g in gpus}
        result: dict[str, list[GpuLink]] = {g.uuid: [] for g in gpus}
        for a in gpus:
            for b in gpus:
                if a.uuid == b.uuid:
                    continue
                status = self.q("nvmlDeviceGetP2PStatus", a.handle, b.handle, nvlink_index)
                if status is not None and int(status) == ok and active[a.uuid]:
                    result[a.uuid].append(GpuLink(b.uuid, LinkType.NVLINK, None, 1, None, active[a.uuid]))
                    continue
                level = self.q("nvmlDeviceGetTopologyCommonAncestor", a.handle, b.handle)
                if level is not None:
                    result[a.uuid].append(GpuLink(b.uuid, LinkType.PCIE, int(level), None, None, 1))
        return {uuid: tuple(links) for uuid, links in result.items()}

    def clique(self, handle: Any) -> str | None:
        factory = getattr(self.nvml, "c_nvmlGpuFabricInfo_t", None)
        byref = getattr(self.nvml, "byref", None)
        if factory is None or byref is None:
            return None
        info = factory()
        if self.q("nvmlDeviceGetGpuFabricInfo", handle, byref(info)) is None:
            return None
        completed = int(getattr(self.nvml, "NVML_GPU_FABRIC_STATE_COMPLETED", 3))
        if int(info.state) != completed or int(info.status) != 0:
            return None
        cluster = bytes(bytearray(info.clusterUuid)).hex()
        uuid = f"{cluster[:8]}-{cluster[8:12]}-{cluster[12:16]}-{cluster[16:20]}-{cluster[20:]}"
        return f"{uuid}.{int(info.cliqueId)}"

    def device(
        self, gpu: NvidiaGpuHandle, links: tuple[GpuLink, ...], system: dict[str, str | None]
    ) -> GpuDevice:
        h = gpu.handle
        pci = self.nvml.nvmlDeviceGetPciInfo(h)
        bdf = nc.normalize_bus_id(pci.busId)
        pci_dir = self.root / "sys/bus/pci/devices" / bdf
        cc = self.q("nvmlDeviceGetCudaComputeCapability", h)
        arch = self.q("nvmlDeviceGetArchitecture", h)
        memory = self.q("nvmlDeviceGetMemoryInfo", h)
        minor = self.q("nvmlDeviceGetMinorNumber", h)
        attrs = self.q("nvmlDeviceGetAttributes", h)
        numa = self.q("nvmlDeviceGetNumaNodeId", h)
        if numa is None:
            numa = read_optional(pci_dir / "numa_node", parse_int)
        nodes = ((f"/dev/nvidia{minor}",) if minor is not None else ()) + CONTROL_NODES
        state = self.partition_state(h)
        migs = self.mig_devices(h, minor, nodes) if state and state.compute == "mig" else ()
        return GpuDevice(
            vendor=Vendor.NVIDIA,
            id=gpu.uuid,
            index=gpu.index,
            pci_address=bdf,
            pci=PciIds(
                vendor_id=int(pci.pciDeviceId) & 0xFFFF,
                device_id=(int(pci.pciDeviceId) >> 16) & 0xFFFF,
                subsystem_vendor_id=int(pci.pciSubSystemId) & 0xFFFF,
                subsystem_device_id=(int(pci.pciSubSystemId) >> 16) & 0xFFFF,
                revision=read_optional(pci_dir / "revision", parse_hex),
            ),
            model=nc.text(self.nvml.nvmlDeviceGetName(h)),
            family=nc.family_for(int(cc[0]), int(cc[1])) if cc else None,
            architecture=nc.architecture_name(int(arch)) if arch is not None else None,
            compute_capability=f"{int(cc[0])}.{int(cc[1])}" if cc else None,
            vram_total_bytes=int(memory.total) if memory is not None else None,
            compute_units=int(attrs.multiprocessorCount) if attrs is not None else None,
            driver_version=system["driver"],
            cuda_driver_version=system["cuda"],
            vbios_version=nc.text(v) if (v := self.q("nvmlDeviceGetVbiosVersion", h)) else None,
            serial=nc.text(s) if (s := self.q("nvmlDeviceGetSerial", h)) else None,
            numa_node=int(numa) if numa is not None and int(numa) >= 0 else None,
            minor_number=int(minor) if minor is not None else None,
            device_nodes=nodes,
            links=links,
            nvlink_clique=self.clique(h),
            partition=state,
            mig_devices=migs,
        )

    def system(self) -> dict[str, str | None]:
        driver = self.q("nvmlSystemGetDriverVersion")
        cuda = self.q("nvmlSystemGetCudaDriverVersion")
        return {
            "driver": nc.text(driver) if driver is not None else None,
            "cuda": nc.cuda_version(int(cuda)) if cuda is not None else None,
        }

    def enumerate(self) -> list[GpuDevice]:
        gpus = self.handles()
        links = self.links(gpus)
        system = self.system()
        result: list[GpuDevice] = []
        for gpu in gpus:
            try:
                result.append(self.device(gpu, links[gpu.uuid], system))
            except self.nvml.NVMLError as exc:
                log.warning("NVIDIA GPU %s skipped: %s", gpu.uuid, exc)
        return result
