"""NVIDIA backend over NVML (nvidia-ml-py's `pynvml`, or an injected pynvml-shaped module)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from gpuop_common.gpu import nvml_calls as nc
from gpuop_common.gpu.base import GpuBackend
from gpuop_common.gpu.errors import (
    InvalidPartitionModeError,
    NvmlUnavailableError,
    PartitionNotSupportedError,
    PartitionWriteError,
)
from gpuop_common.gpu.models import (
    EccCounts,
    FieldErrorKind,
    GpuDevice,
    GpuHealth,
    GpuTelemetry,
    HealthReason,
    MigDevice,
    PartitionHealth,
    PartitionState,
    PcieReading,
    TempSensor,
    Vendor,
)
from gpuop_common.gpu.nvidia_inventory import NvmlInventory
from gpuop_common.gpu.nvidia_mig import MigWriter

log = logging.getLogger(__name__)

# Application-caused XIDs the NVIDIA device plugin ignores (internal/rm/health.go).
DEFAULT_IGNORED_XIDS = frozenset({13, 31, 43, 45, 68, 109})
EVENT_XID_CRITICAL = 0x8
NO_MIG_ID = 0xFFFFFFFF
_MIG_MODES = {"none": 0, "mig": 1}


class NvmlBackend(GpuBackend):
    """`available` is False (and every query empty) on a node without the NVIDIA driver/library."""

    vendor = Vendor.NVIDIA

    def __init__(
        self,
        nvml: Any | None = None,
        host_root: Path | str = "/",
        ignored_xids: frozenset[int] = DEFAULT_IGNORED_XIDS,
    ) -> None:
        self.root = Path(host_root)
        self.ignored_xids = ignored_xids
        self.available = False
        self.unavailable_reason = ""
        self._nvml: Any = None
        self._event_set: Any = None
        self._baseline: dict[str, str | None] | None = None  # uuid -> its /dev node if present at start
        self._xids: dict[str, list[HealthReason]] = {}
        self._init(nvml)

    def _init(self, module: Any | None) -> None:
        try:
            nvml = nc.load_nvml(module)
        except ImportError as exc:
            self.unavailable_reason = f"NVML module not importable: {exc}"
            log.info("no NVIDIA driver: %s", self.unavailable_reason)
            return
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            if nc.error_code(exc) in nc.NO_DRIVER_CODES:
                self.unavailable_reason = f"no NVIDIA driver: {exc}"
                log.info("%s", self.unavailable_reason)
                return
            raise NvmlUnavailableError(f"nvmlInit failed: {exc}") from exc
        self._nvml = nvml
        self.available = True
        self._register_events()

    @property
    def _inv(self) -> NvmlInventory:
        return NvmlInventory(self._nvml, self.root)

    def close(self) -> None:
        if not self.available:
            return
        if self._event_set is not None:
            self._inv.q("nvmlEventSetFree", self._event_set)
            self._event_set = None
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            log.warning("nvmlShutdown failed: %s", exc)
        self.available = False

    def enumerate(self) -> list[GpuDevice]:
        return self._inv.enumerate() if self.available else []

    # health --------------------------------------------------------------------------------------
    def _register_events(self) -> None:
        inv = self._inv
        self._event_set = inv.q("nvmlEventSetCreate")
        if self._event_set is None:
            log.warning("NVML event sets unavailable; XID health checks are off")
            return
        xid_mask = int(getattr(self._nvml, "nvmlEventTypeXidCriticalError", EVENT_XID_CRITICAL))
        for gpu in inv.handles():
            supported = inv.q("nvmlDeviceGetSupportedEventTypes", gpu.handle)
            mask = xid_mask & int(supported) if supported is not None else 0
            if not mask:
                log.warning("GPU %s does not report XID events", gpu.uuid)
                continue
            try:
                self._nvml.nvmlDeviceRegisterEvents(gpu.handle, mask, self._event_set)
            except self._nvml.NVMLError as exc:
                log.warning("GPU %s: registering XID events failed: %s", gpu.uuid, exc)

    def _drain_events(self, migs: dict[tuple[str, int, int], str]) -> None:
        if self._event_set is None:
            return
        xid_mask = int(getattr(self._nvml, "nvmlEventTypeXidCriticalError", EVENT_XID_CRITICAL))
        while True:
            try:
                data = self._nvml.nvmlEventSetWait(self._event_set, 0)
            except self._nvml.NVMLError as exc:
                if nc.error_code(exc) != nc.ERROR_TIMEOUT:
                    log.warning("NVML event wait failed: %s", exc)
                return
            if not int(data.eventType) & xid_mask:
                continue
            xid = int(data.eventData)
            if xid in self.ignored_xids:
                log.info("ignoring application XID %d", xid)
                continue
            uuid = nc.text(self._nvml.nvmlDeviceGetUUID(data.device))
            gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
            target = migs.get((uuid, gi, ci), uuid) if gi != NO_MIG_ID else uuid
            reason = HealthReason("xid_critical", f"critical XID {xid}", f"nvml:xid:{xid}")
            log.warning("GPU %s: critical XID %d", target, xid)
            self._xids.setdefault(target, []).append(reason)

    def reset_health(self) -> None:
        self._baseline = None
        self._xids.clear()

    def _health_view(self) -> list[tuple[str, int | None, list[MigDevice]]]:
        """(uuid, minor, MIG devices) per visible GPU; cheaper than enumerate() (no peer links)."""
        inv = self._inv
        view: list[tuple[str, int | None, list[MigDevice]]] = []
        for gpu in inv.handles():
            minor = inv.q("nvmlDeviceGetMinorNumber", gpu.handle)
            state = inv.partition_state(gpu.handle)
            migs = list(inv.mig_devices(gpu.handle, None, ())) if state and state.compute == "mig" else []
            view.append((gpu.uuid, int(minor) if minor is not None else None, migs))
        return view

    def health(self) -> list[GpuHealth]:
        if not self.available:
            return []
        view = self._health_view()
        if self._baseline is None:
            self._baseline = {}
        for uuid, minor, _ in view:
            if uuid not in self._baseline:
                node = f"/dev/nvidia{minor}" if minor is not None else None
                # Only a node that existed at the start can be "gone" later (see AmdSysfsBackend).
                exists = node is not None and (self.root / node.lstrip("/")).exists()
                self._baseline[uuid] = node if exists else None
        migs = {
            (uuid, m.gpu_instance_id or 0, m.compute_instance_id or 0): m.uuid
            for uuid, _, ms in view
            for m in ms
        }
        self._drain_events(migs)
        current = {uuid: ms for uuid, _, ms in view}
        results: list[GpuHealth] = []
        for uuid, node in self._baseline.items():
            reasons = list(self._xids.get(uuid, ()))
            if uuid not in current:
                reasons.append(HealthReason("device_lost", f"GPU {uuid} is no longer visible to NVML"))
            else:
                reasons.extend(self._probe(uuid))
                if node is not None and not (self.root / node.lstrip("/")).exists():
                    reasons.append(HealthReason("device_node_missing", f"device node {node} is gone", node))
            parts = tuple(
                PartitionHealth(m.uuid, tuple(self._xids.get(m.uuid, ()))) for m in current.get(uuid, ())
            )
            results.append(GpuHealth(uuid, tuple(reasons), parts))
        return results

    def _probe(self, uuid: str) -> list[HealthReason]:
        try:
            handle = self._nvml.nvmlDeviceGetHandleByUUID(uuid)
            self._nvml.nvmlDeviceGetMemoryInfo(handle)
        except self._nvml.NVMLError as exc:
            return [HealthReason("device_lost", f"GPU {uuid} does not answer NVML: {exc}", "nvml")]
        return []

    # telemetry -----------------------------------------------------------------------------------
    def telemetry(self) -> list[GpuTelemetry]:
        if not self.available:
            return []
        result: list[GpuTelemetry] = []
        inv = self._inv
        for gpu in inv.handles():
            result.append(self._read_gpu(gpu.uuid, gpu.handle))
            state = inv.partition_state(gpu.handle)
            if state is not None and state.compute == "mig":
                for mig in inv.mig_devices(gpu.handle, None, ()):
                    result.append(self._read_mig(gpu.uuid, gpu.handle, mig.index, mig.uuid))
        return result

    def _read_mig(self, gpu_id: str, handle: Any, slot: int, mig_uuid: str) -> GpuTelemetry:
        reader = nc.NvmlFieldReader(self._nvml, gpu_id)
        mig = reader.call("mig", "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        memory = reader.call("vram", "nvmlDeviceGetMemoryInfo", mig) if mig is not None else None
        return GpuTelemetry(
            gpu_id=gpu_id,
            partition_id=mig_uuid,
            vram_total_bytes=int(memory.total) if memory is not None else None,
            vram_used_bytes=int(memory.used) if memory is not None else None,
            vram_free_bytes=int(memory.free) if memory is not None else None,
            errors=tuple(reader.errors),
        )

    def _read_gpu(self, uuid: str, h: Any) -> GpuTelemetry:
        n = self._nvml
        r = nc.NvmlFieldReader(n, uuid)
        temps: dict[TempSensor, float] = {}
        if (
            t := r.call("temperature.gpu", "nvmlDeviceGetTemperature", h, n.NVML_TEMPERATURE_GPU)
        ) is not None:
            temps[TempSensor.GPU] = float(t)
        fields = r.call(
            "fields",
            "nvmlDeviceGetFieldValues",
            h,
            [n.NVML_FI_DEV_MEMORY_TEMP, n.NVML_FI_DEV_POWER_AVERAGE, n.NVML_FI_DEV_PCIE_REPLAY_COUNTER],
        )
        mem_temp = avg_mw = replay = None
        if fields is not None:
            mem_temp, avg_mw, replay = (nc.field_value(v) for v in list(fields)[:3])
            for name, value in (
                ("temperature.memory", mem_temp),
                ("power.average", avg_mw),
                ("pcie.replay_count", replay),
            ):
                if value is None:
                    r.fail(name, FieldErrorKind.NOT_SUPPORTED, "nvmlDeviceGetFieldValues")
        if mem_temp is not None:
            temps[TempSensor.MEMORY] = float(mem_temp)
        power = r.call("power.current", "nvmlDeviceGetPowerUsage", h)
        cap = r.call("power.cap", "nvmlDeviceGetEnforcedPowerLimit", h)
        energy = r.call("energy", "nvmlDeviceGetTotalEnergyConsumption", h)
        util = r.call("utilization", "nvmlDeviceGetUtilizationRates", h)
        memory = r.call("vram", "nvmlDeviceGetMemoryInfo", h)
        reasons = r.call("throttle_reasons", "nvmlDeviceGetCurrentClocksEventReasons", h)
        if reasons is None and not hasattr(n, "nvmlDeviceGetCurrentClocksEventReasons"):
            r.errors.pop()
            reasons = r.call("throttle_reasons", "nvmlDeviceGetCurrentClocksThrottleReasons", h)
        links = self._inv.active_nvlinks(h)
        return GpuTelemetry(
            gpu_id=uuid,
            temperatures_c=temps,
            power_w=power / 1000.0 if power is not None else None,
            power_average_w=avg_mw / 1000.0 if avg_mw is not None else None,
            power_cap_w=cap / 1000.0 if cap is not None else None,
            energy_j=energy / 1000.0 if energy is not None else None,
            gpu_util_percent=float(util.gpu) if util is not None else None,
            memory_util_percent=float(util.memory) if util is not None else None,
            vram_total_bytes=int(memory.total) if memory is not None else None,
            vram_used_bytes=int(memory.used) if memory is not None else None,
            vram_free_bytes=int(memory.free) if memory is not None else None,
            shader_clock_mhz=_float(r.call("clock.shader", "nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_SM)),
            memory_clock_mhz=_float(r.call("clock.memory", "nvmlDeviceGetClockInfo", h, n.NVML_CLOCK_MEM)),
            pcie=self._pcie(r, h, replay),
            ecc=self._ecc(r, h),
            link_count=links,
            link_rx_bytes=self._nvlink_bytes(r, h, links, n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX),
            link_tx_bytes=self._nvlink_bytes(r, h, links, n.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX),
            throttle_reasons=nc.throttle_names(int(reasons)) if reasons is not None else None,
            errors=tuple(r.errors),
        )

    def _pcie(self, r: nc.NvmlFieldReader, h: Any, replay: float | int | None) -> PcieReading:
        n = self._nvml
        rx = r.call("pcie.rx", "nvmlDeviceGetPcieThroughput", h, n.NVML_PCIE_UTIL_RX_BYTES)
        tx = r.call("pcie.tx", "nvmlDeviceGetPcieThroughput", h, n.NVML_PCIE_UTIL_TX_BYTES)
        return PcieReading(
            current_gen=_int(r.call("pcie.current_gen", "nvmlDeviceGetCurrPcieLinkGeneration", h)),
            current_width=_int(r.call("pcie.current_width", "nvmlDeviceGetCurrPcieLinkWidth", h)),
            max_gen=_int(r.call("pcie.max_gen", "nvmlDeviceGetMaxPcieLinkGeneration", h)),
            max_width=_int(r.call("pcie.max_width", "nvmlDeviceGetMaxPcieLinkWidth", h)),
            rx_bytes_per_s=rx * 1024.0 if rx is not None else None,  # NVML reports KB/s
            tx_bytes_per_s=tx * 1024.0 if tx is not None else None,
            replay_count=int(replay) if replay is not None else None,
        )

    def _ecc(self, r: nc.NvmlFieldReader, h: Any) -> dict[str, EccCounts]:
        n = self._nvml
        ce, ue = n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        result: dict[str, EccCounts] = {}
        total = EccCounts(
            _int(r.call("ecc.total.ce", "nvmlDeviceGetTotalEccErrors", h, ce, n.NVML_VOLATILE_ECC)),
            _int(r.call("ecc.total.ue", "nvmlDeviceGetTotalEccErrors", h, ue, n.NVML_VOLATILE_ECC)),
        )
        if total != EccCounts():
            result["total"] = total
        for block, location in (("dram", n.NVML_MEMORY_LOCATION_DRAM), ("sram", n.NVML_MEMORY_LOCATION_SRAM)):
            counts = EccCounts(
                _int(
                    r.call(
                        f"ecc.{block}.ce",
                        "nvmlDeviceGetMemoryErrorCounter",
                        h,
                        ce,
                        n.NVML_VOLATILE_ECC,
                        location,
                    )
                ),
                _int(
                    r.call(
                        f"ecc.{block}.ue",
                        "nvmlDeviceGetMemoryErrorCounter",
                        h,
                        ue,
                        n.NVML_VOLATILE_ECC,
                        location,
                    )
                ),
            )
            if counts != EccCounts():
                result[block] = counts
        return result

    def _nvlink_bytes(self, r: nc.NvmlFieldReader, h: Any, links: int, field_id: int) -> int | None:
        """Sum of the per-link data counters (KiB) over the active links, in bytes."""
        if not links:
            return None
        values = r.call(
            "nvlink.throughput", "nvmlDeviceGetFieldValues", h, [(field_id, link) for link in range(links)]
        )
        if values is None:
            return None
        numbers = [nc.field_value(v) for v in list(values)[:links]]
        if any(v is None for v in numbers):
            r.fail("nvlink.throughput", FieldErrorKind.NOT_SUPPORTED, "nvmlDeviceGetFieldValues")
            return None
        return int(sum(v for v in numbers if v is not None)) * 1024

    # partitions ----------------------------------------------------------------------------------
    def _handle_of(self, gpu_id: str) -> tuple[str, Any]:
        gpu = self.find(gpu_id)
        return gpu.id, self._nvml.nvmlDeviceGetHandleByUUID(gpu.id)

    def get_partition_mode(self, gpu_id: str) -> PartitionState:
        uuid, handle = self._handle_of(gpu_id)
        state = self._inv.partition_state(handle)
        if state is None:
            raise PartitionNotSupportedError(uuid, "MIG")
        return state

    def set_partition_mode(self, gpu_id: str, mode: str) -> PartitionState:
        state = self.get_partition_mode(gpu_id)
        uuid, handle = self._handle_of(gpu_id)
        wanted = mode.strip().lower()
        if wanted not in _MIG_MODES:
            raise InvalidPartitionModeError(uuid, mode, state.available_compute)
        try:
            self._nvml.nvmlDeviceSetMigMode(handle, _MIG_MODES[wanted])
        except self._nvml.NVMLError as exc:
            raise PartitionWriteError(uuid, "nvmlDeviceSetMigMode", str(exc)) from exc
        log.info("GPU %s: MIG mode set to %s (applies after GPU reset if pending)", uuid, wanted)
        return self.get_partition_mode(uuid)

    def mig_writer(self, gpu_id: str) -> MigWriter:
        """MIG mode and instance writes for one GPU (see nvidia_mig)."""
        gpu = self.find(gpu_id)
        return MigWriter(self._nvml, self._nvml.nvmlDeviceGetHandleByUUID(gpu.id), gpu.id, gpu.model)


def _int(value: Any) -> int | None:
    return int(value) if value is not None else None


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None
