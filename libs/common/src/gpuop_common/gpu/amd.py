"""AMD backend: amdgpu sysfs, hwmon and KFD topology under one host root (no ROCm libraries)."""

from __future__ import annotations

import errno
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

from gpuop_common.gpu import amd_ids
from gpuop_common.gpu.amd_inventory import AmdGpuSource, build_inventory
from gpuop_common.gpu.amd_partition import MEMORY_ATTR, PartitionPlanError, plan_writes
from gpuop_common.gpu.amd_smi import ToolWriteError
from gpuop_common.gpu.amd_telemetry import read_ras, read_telemetry
from gpuop_common.gpu.amd_topology import TopologyCache
from gpuop_common.gpu.base import GpuBackend
from gpuop_common.gpu.errors import (
    InvalidPartitionModeError,
    PartitionNotSupportedError,
    PartitionRefusedError,
    PartitionWriteError,
)
from gpuop_common.gpu.models import (
    FieldErrorKind,
    GpuDevice,
    GpuHealth,
    GpuTelemetry,
    HealthReason,
    LinkType,
    PartitionHealth,
    PartitionState,
    Vendor,
)
from gpuop_common.gpu.sysfs import FieldReader
from gpuop_common.gpu.sysfs_write import AttrWriter, writer_from_env

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Baseline:
    """What a GPU looked like when health monitoring started."""

    bdf: str
    render_minors: dict[str, int]  # partition id (or GPU id) -> KFD render minor
    ras_ue: dict[str, int] = field(default_factory=dict)
    # Only device nodes that existed at the start count as "gone" later: an agent whose host root
    # has no /dev mounted must not report every GPU unhealthy.
    device_nodes: set[str] = field(default_factory=set)


def split_mode(mode: str) -> tuple[str | None, str | None]:
    """`CPX`, `NPS4`, `cpx_nps4` or `CPX-NPS4` -> (compute, memory), upper-case."""
    compute: str | None = None
    memory: str | None = None
    for raw in mode.replace("-", "_").split("_"):
        token = raw.strip().upper()
        if not token:
            continue
        if token.startswith("NPS"):
            memory = token
        else:
            compute = token
    return compute, memory


class AmdSysfsBackend(GpuBackend):
    vendor = Vendor.AMD

    def __init__(
        self,
        host_root: Path | str = "/",
        writer: AttrWriter | None = None,
        topology: TopologyCache | None = None,
    ) -> None:
        self.root = Path(host_root)
        # Partition files are written through one function (see sysfs_write: a stand-in driver hooks it).
        self._write = writer if writer is not None else writer_from_env()
        self._baseline: dict[str, _Baseline] | None = None
        self._topology = topology or TopologyCache()

    # inventory -----------------------------------------------------------------------------------
    def _inventory(self) -> list[tuple[GpuDevice, AmdGpuSource]]:
        devices, sources = build_inventory(self.root, self._topology)
        return list(zip(devices, sources, strict=True))

    def enumerate(self) -> list[GpuDevice]:
        return [gpu for gpu, _ in self._inventory()]

    # health --------------------------------------------------------------------------------------
    def _snapshot(self, gpu: GpuDevice, source: AmdGpuSource) -> _Baseline:
        minors = {p.id: p.render_minor for p in gpu.partitions}
        if not minors and gpu.render_minor is not None and source.kfd_nodes:
            minors[gpu.id] = gpu.render_minor
        nodes = set(gpu.device_nodes) | {n for p in gpu.partitions for n in p.device_nodes}
        present = {n for n in nodes if (self.root / n.lstrip("/")).exists()}
        return _Baseline(gpu.pci_address, minors, self._ras_ue(gpu.id, source), present)

    def _ras_ue(self, gpu_id: str, source: AmdGpuSource) -> dict[str, int]:
        if source.device_dir is None:
            return {}
        ras = read_ras(FieldReader(gpu_id), source.device_dir)
        return {block: c.uncorrectable for block, c in ras.items() if c.uncorrectable is not None}

    def reset_health(self) -> None:
        self._baseline = None

    def health(self) -> list[GpuHealth]:
        inventory = self._inventory()
        if self._baseline is None:
            self._baseline = {gpu.id: self._snapshot(gpu, src) for gpu, src in inventory}
        current = {gpu.id: (gpu, src) for gpu, src in inventory}
        results: list[GpuHealth] = []
        for gpu_id, base in sorted(self._baseline.items(), key=lambda kv: kv[1].bdf):
            if gpu_id not in current:
                reason = HealthReason(
                    "gpu_vanished", f"GPU {base.bdf} has neither a DRM card nor a KFD node any more", base.bdf
                )
                parts = tuple(PartitionHealth(pid, (reason,)) for pid in base.render_minors if pid != gpu_id)
                results.append(GpuHealth(gpu_id, (reason,), parts))
                continue
            gpu, source = current[gpu_id]
            results.append(self._check(gpu, source, base))
        for gpu_id, (gpu, source) in current.items():
            if gpu_id not in self._baseline:
                self._baseline[gpu_id] = self._snapshot(gpu, source)
                results.append(self._check(gpu, source, self._baseline[gpu_id]))
        return results

    def _missing_nodes(self, nodes: tuple[str, ...], base: _Baseline) -> list[HealthReason]:
        return [
            HealthReason("device_node_missing", f"device node {node} is gone", node)
            for node in nodes
            if node in base.device_nodes and not (self.root / node.lstrip("/")).exists()
        ]

    def _check(self, gpu: GpuDevice, source: AmdGpuSource, base: _Baseline) -> GpuHealth:
        reasons: list[HealthReason] = []
        kfd_minors = {n.render_minor for n in source.kfd_nodes}
        if base.render_minors and not source.kfd_nodes:
            reasons.append(HealthReason("kfd_node_vanished", f"GPU {gpu.pci_address} has no KFD node"))
        for node in source.kfd_nodes:
            if node.prop("gfx_target_version") == 0:
                reasons.append(
                    HealthReason(
                        "gfx_target_version_zero", "KFD reports gfx_target_version 0", str(node.path)
                    )
                )
        reasons.extend(self._missing_nodes(gpu.device_nodes, base))
        reasons.extend(self._ras_reasons(gpu.id, source, base))
        parts: list[PartitionHealth] = []
        for part in gpu.partitions:
            own: list[HealthReason] = []
            if part.render_minor not in kfd_minors:
                own.append(HealthReason("kfd_node_vanished", f"partition {part.id} has no KFD node"))
            own.extend(self._missing_nodes(part.device_nodes, base))
            parts.append(PartitionHealth(part.id, tuple(own)))
        current_ids = {p.id for p in gpu.partitions}
        for pid, minor in base.render_minors.items():
            if pid != gpu.id and pid not in current_ids:
                reason = HealthReason("kfd_node_vanished", f"partition {pid} (renderD{minor}) vanished")
                parts.append(PartitionHealth(pid, (reason,)))
        return GpuHealth(gpu.id, tuple(reasons), tuple(parts))

    def _ras_reasons(self, gpu_id: str, source: AmdGpuSource, base: _Baseline) -> list[HealthReason]:
        reasons: list[HealthReason] = []
        for block, count in self._ras_ue(gpu_id, source).items():
            before = base.ras_ue.setdefault(block, count)
            if count > before:
                ras_dir = source.device_dir / "ras" if source.device_dir else Path("ras")
                source_file = str(ras_dir / f"{block}_err_count")
                reasons.append(
                    HealthReason(
                        "ras_uncorrectable_increase",
                        f"RAS block {block}: uncorrectable errors rose from {before} to {count}",
                        source_file,
                    )
                )
            elif count < before:
                # Counters restart after a driver reload; the new value is the new baseline.
                base.ras_ue[block] = count
        return reasons

    # telemetry -----------------------------------------------------------------------------------
    def telemetry(self) -> list[GpuTelemetry]:
        result: list[GpuTelemetry] = []
        for gpu, source in self._inventory():
            xgmi_peers = sum(1 for link in gpu.links if link.link_type == LinkType.XGMI and link.hops == 1)
            try:
                result.append(read_telemetry(gpu.id, source, xgmi_peers if source.kfd_nodes else None))
            except OSError as exc:  # a dir that vanished or turned unreadable mid-read
                reader = FieldReader(gpu.id)
                reader.fail("device", FieldErrorKind.UNREADABLE, str(source.device_dir), str(exc))
                result.append(GpuTelemetry(gpu_id=gpu.id, errors=tuple(reader.errors)))
        return result

    # partitions ----------------------------------------------------------------------------------
    def _locate(self, gpu_id: str) -> tuple[GpuDevice, AmdGpuSource]:
        inventory = self._inventory()
        gpu = self.find(gpu_id, [g for g, _ in inventory])
        return next((g, s) for g, s in inventory if g.id == gpu.id)

    def get_partition_mode(self, gpu_id: str) -> PartitionState:
        gpu, _ = self._locate(gpu_id)
        if gpu.partition is None:
            raise PartitionNotSupportedError(gpu.id, "compute and memory")
        return gpu.partition

    def xcc_count(self, gpu_id: str) -> int | None:
        """XCCs of the whole GPU: the product's count when known, else the sum of KFD `num_xcc`.

        The product wins because KFD can show fewer partitions than XCCs (the MI300X CPX capture's
        last GPU has 7 nodes), and the driver's rules count the chip's XCCs.
        """
        gpu, source = self._locate(gpu_id)
        return _xcc_count(gpu, source)

    def xcc_counts(self) -> dict[str, int | None]:
        """`xcc_count` of every GPU from one inventory read."""
        return {gpu.id: _xcc_count(gpu, source) for gpu, source in self._inventory()}

    def set_partition_mode(self, gpu_id: str, mode: str) -> PartitionState:
        gpu, source = self._locate(gpu_id)
        state = gpu.partition
        compute, memory = split_mode(mode)
        if compute is None and memory is None:
            raise InvalidPartitionModeError(gpu.id, mode, state.available_compute if state else ())
        if state is None or source.device_dir is None:
            raise PartitionNotSupportedError(gpu.id, "compute and memory")
        for wanted, available, what in (
            (compute, state.available_compute, "compute"),
            (memory, state.available_memory, "memory"),
        ):
            if wanted is None:
                continue
            if not available:
                raise PartitionNotSupportedError(gpu.id, what)
            if wanted not in available:
                raise InvalidPartitionModeError(gpu.id, wanted, available)
        try:
            writes = plan_writes(
                (state.compute, state.memory),
                (compute, memory),
                (state.available_compute, state.available_memory),
                _xcc_count(gpu, source),
            )
        except PartitionPlanError as exc:
            raise PartitionRefusedError(gpu.id, str(exc)) from exc
        for write in writes:
            target = source.device_dir / write.attr
            try:
                self._write(target, write.value)
                in_force = target.read_text().strip().upper() if write.attr == MEMORY_ATTR else write.value
            except OSError as exc:
                name = errno.errorcode.get(exc.errno) if exc.errno is not None else None
                if isinstance(exc, ToolWriteError):  # amd-smi: name its command, not the file
                    raise PartitionWriteError(gpu.id, exc.via, exc.strerror or str(exc), name) from exc
                raise PartitionWriteError(gpu.id, str(target), str(exc), name) from exc
            log.info("GPU %s: wrote %s to %s", gpu.id, write.value, target)
            if in_force != write.value:
                # The driver took the memory partition as a request for its next load: the writes
                # after it are checked against the mode in force then, so they wait for the reload.
                log.info("GPU %s: memory partition %s pending a driver reload", gpu.id, write.value)
                return replace(self.get_partition_mode(gpu.id), pending_memory=write.value)
        return self.get_partition_mode(gpu.id)


def _xcc_count(gpu: GpuDevice, source: AmdGpuSource) -> int | None:
    product = amd_ids.product_for(gpu.pci.device_id)
    if product is not None and product.xcc_count is not None:
        return product.xcc_count
    counts = [node.prop("num_xcc") for node in source.kfd_nodes]
    if not counts or any(count is None for count in counts):
        return None
    return sum(count for count in counts if count is not None)
