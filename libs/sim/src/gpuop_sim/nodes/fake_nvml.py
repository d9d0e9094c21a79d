"""A pynvml-shaped fake of NVML, driven by an NvmlState (in-process) or the node's JSON state file.

Same function names, argument names, constants and NVMLError subclasses as nvidia-ml-py, so the NVML
backend runs unchanged against it. Use it two ways:
- in-process: `FakeNvml(state)` is a module-like object to pass to `NvmlBackend(nvml=...)`;
- as the module `gpuop_sim.nodes.fake_nvml` (env `GPUOP_NVML_MODULE`), reading the file named by
  `GPUOP_FAKE_NVML_STATE`; no file means "no NVIDIA library" (NVMLError_LibraryNotFound).
"""

# pynvml's public names are camelCase (nvmlEventTypeXidCriticalError, ...); the fake keeps them.

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from gpuop_sim.nodes.fake_nvml_api import *  # noqa: F403 - the module is the pynvml-shaped API
from gpuop_sim.nodes.fake_nvml_api import (
    _HOPPER_NVLINKS,
    _SUPPORTED_EVENTS,
    NVML_CLOCK_GRAPHICS,
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_SUPPORTED,
    NVML_ERROR_TIMEOUT,
    NVML_FEATURE_DISABLED,
    NVML_FEATURE_ENABLED,
    NVML_FI_DEV_MEMORY_TEMP,
    NVML_FI_DEV_NVLINK_LINK_COUNT,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
    NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    NVML_FI_DEV_PCIE_REPLAY_COUNTER,
    NVML_FI_DEV_POWER_AVERAGE,
    NVML_FI_DEV_POWER_INSTANT,
    NVML_MEMORY_ERROR_TYPE_CORRECTED,
    NVML_MEMORY_LOCATION_DRAM,
    NVML_P2P_CAPS_INDEX_NVLINK,
    NVML_P2P_STATUS_NOT_SUPPORTED,
    NVML_P2P_STATUS_OK,
    NVML_PCIE_UTIL_TX_BYTES,
    NVML_SUCCESS,
    NVML_TEMPERATURE_GPU,
    NVML_TOPOLOGY_NODE,
    NVML_TOPOLOGY_SYSTEM,
    NVML_VALUE_TYPE_UNSIGNED_INT,
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
    STATE_ENV,
    _EventData,
    _EventSet,
    _fail,
    _FieldValue,
    _Handle,
    _Utilization,
    _Value,
    nvmlEventTypeXidCriticalError,
)
from gpuop_sim.nodes.fake_nvml_mig import FakeNvmlMig


class FakeNvml(FakeNvmlMig):
    """One fake NVML library instance; attribute access falls back to this module's constants."""

    def __getattr__(self, name: str) -> Any:
        try:
            return globals()[name]
        except KeyError:
            raise AttributeError(name) from None

    # telemetry ---------------------------------------------------------------------------------
    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetTemperature", mig_ok=False)
        if sensor != NVML_TEMPERATURE_GPU:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature_c

    def nvmlDeviceGetFieldValues(self, handle: _Handle, fieldIds: list[Any]) -> list[_FieldValue]:  # noqa: N802, N803
        gpu = self._gpu(handle, "nvmlDeviceGetFieldValues", mig_ok=False)
        values: list[_FieldValue] = []
        for entry in fieldIds:
            field_id, scope = entry if isinstance(entry, tuple) else (entry, 0)
            number: int | None = {
                NVML_FI_DEV_MEMORY_TEMP: gpu.memory_temperature_c,
                NVML_FI_DEV_POWER_AVERAGE: gpu.power_average_mw,
                NVML_FI_DEV_POWER_INSTANT: gpu.power_mw,
                NVML_FI_DEV_PCIE_REPLAY_COUNTER: gpu.pcie_replay,
                NVML_FI_DEV_NVLINK_LINK_COUNT: gpu.nvlinks_active,
            }.get(field_id)
            if field_id in (NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX):
                per_link = (
                    gpu.nvlink_tx_kib_per_link
                    if field_id == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
                    else (gpu.nvlink_rx_kib_per_link)
                )
                number = per_link if 0 <= scope < gpu.nvlinks_active else None
            ok = number is not None and f"field:{field_id}" not in gpu.unsupported
            values.append(
                _FieldValue(
                    fieldId=field_id,
                    scopeId=scope,
                    timestamp=time.time_ns() // 1000,
                    latencyUsec=0,
                    valueType=NVML_VALUE_TYPE_UNSIGNED_LONG_LONG if ok else NVML_VALUE_TYPE_UNSIGNED_INT,
                    nvmlReturn=NVML_SUCCESS if ok else NVML_ERROR_NOT_SUPPORTED,
                    value=_Value(ullVal=number if ok and number is not None else 0),
                )
            )
        return values

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetPowerUsage", mig_ok=False).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit", mig_ok=False).power_limit_mw

    def nvmlDeviceGetPowerManagementLimit(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetPowerManagementLimit", mig_ok=False).power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption", mig_ok=False).energy_mj

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> _Utilization:  # noqa: N802
        gpu = self._gpu(handle, "nvmlDeviceGetUtilizationRates", mig_ok=False)
        return _Utilization(gpu.util_gpu, gpu.util_memory)

    def nvmlDeviceGetClockInfo(self, handle: _Handle, type: int) -> int:  # noqa: N802 - pynvml's names
        gpu = self._gpu(handle, "nvmlDeviceGetClockInfo", mig_ok=False)
        if type in (NVML_CLOCK_SM, NVML_CLOCK_GRAPHICS):
            return gpu.sm_clock_mhz
        if type == NVML_CLOCK_MEM:
            return gpu.mem_clock_mhz
        raise _fail(NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetCurrPcieLinkGeneration", mig_ok=False).pcie_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetCurrPcieLinkWidth", mig_ok=False).pcie_width

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetMaxPcieLinkGeneration", mig_ok=False).pcie_max_gen

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetMaxPcieLinkWidth", mig_ok=False).pcie_max_width

    def nvmlDeviceGetPcieThroughput(self, device: _Handle, counter: int) -> int:  # noqa: N802
        gpu = self._gpu(device, "nvmlDeviceGetPcieThroughput", mig_ok=False)
        return gpu.pcie_tx_kbs if counter == NVML_PCIE_UTIL_TX_BYTES else gpu.pcie_rx_kbs

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, errorType: int, counterType: int) -> int:  # noqa: N802, N803
        gpu = self._gpu(handle, "nvmlDeviceGetTotalEccErrors", mig_ok=False)
        return gpu.ecc_corrected if errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED else gpu.ecc_uncorrected

    def nvmlDeviceGetMemoryErrorCounter(  # noqa: N802
        self,
        handle: _Handle,
        errorType: int,  # noqa: N803
        counterType: int,  # noqa: N803
        locationType: int,  # noqa: N803
    ) -> int:
        gpu = self._gpu(handle, "nvmlDeviceGetMemoryErrorCounter", mig_ok=False)
        if locationType != NVML_MEMORY_LOCATION_DRAM:
            return 0
        return gpu.ecc_corrected if errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED else gpu.ecc_uncorrected

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:  # noqa: N802
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons", mig_ok=False).clocks_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> int:  # noqa: N802
        return self.nvmlDeviceGetCurrentClocksEventReasons(handle)

    # interconnect ------------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, device: _Handle, link: int) -> int:  # noqa: N802
        gpu = self._gpu(device, "nvmlDeviceGetNvLinkState", mig_ok=False)
        if not 0 <= link < _HOPPER_NVLINKS:
            raise _fail(NVML_ERROR_INVALID_ARGUMENT)
        return NVML_FEATURE_ENABLED if link < gpu.nvlinks_active else NVML_FEATURE_DISABLED

    def nvmlDeviceGetP2PStatus(self, device1: _Handle, device2: _Handle, p2pIndex: int) -> int:  # noqa: N802, N803
        a = self._gpu(device1, "nvmlDeviceGetP2PStatus", mig_ok=False)
        b = self._gpu(device2, "nvmlDeviceGetP2PStatus", mig_ok=False)
        if p2pIndex == NVML_P2P_CAPS_INDEX_NVLINK:
            linked = self._st().nvlink_p2p and a.nvlinks_active > 0 and b.nvlinks_active > 0
            return NVML_P2P_STATUS_OK if linked else NVML_P2P_STATUS_NOT_SUPPORTED
        return NVML_P2P_STATUS_OK

    def nvmlDeviceGetTopologyCommonAncestor(self, device1: _Handle, device2: _Handle) -> int:  # noqa: N802
        a = self._gpu(device1, "nvmlDeviceGetTopologyCommonAncestor", mig_ok=False)
        b = self._gpu(device2, "nvmlDeviceGetTopologyCommonAncestor", mig_ok=False)
        return NVML_TOPOLOGY_NODE if a.numa_node == b.numa_node else NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetGpuFabricInfo(self, device: _Handle, gpuFabricInfo: Any) -> int:  # noqa: N802, N803
        self._gpu(device, "nvmlDeviceGetGpuFabricInfo", mig_ok=False)
        # HGX H100 boards are not fabric-attached (no IMEX clique).
        raise _fail(NVML_ERROR_NOT_SUPPORTED)

    # events ------------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> _EventSet:  # noqa: N802
        state = self._st()
        return _EventSet(cursor=max((e.seq for e in state.events), default=0))

    def nvmlDeviceGetSupportedEventTypes(self, handle: _Handle) -> int:  # noqa: N802
        self._gpu(handle, "nvmlDeviceGetSupportedEventTypes", mig_ok=False)
        return _SUPPORTED_EVENTS

    def nvmlDeviceRegisterEvents(self, handle: _Handle, eventTypes: int, eventSet: _EventSet) -> None:  # noqa: N802, N803
        gpu = self._gpu(handle, "nvmlDeviceRegisterEvents", mig_ok=False)
        if eventTypes & ~_SUPPORTED_EVENTS:
            raise _fail(NVML_ERROR_NOT_SUPPORTED)
        eventSet.registered[gpu.uuid] = eventSet.registered.get(gpu.uuid, 0) | int(eventTypes)

    def nvmlEventSetWait(self, eventSet: _EventSet, timeoutms: int) -> _EventData:  # noqa: N802, N803
        deadline = time.monotonic() + max(int(timeoutms), 0) / 1000.0
        while True:
            state = self._st()
            for event in state.events:
                if event.seq <= eventSet.cursor:
                    continue
                eventSet.cursor = event.seq
                mask = eventSet.registered.get(event.uuid, 0)
                if not mask & nvmlEventTypeXidCriticalError:
                    continue
                index = next(i for i, g in enumerate(state.gpus) if g.uuid == event.uuid)
                return _EventData(
                    _Handle(index),
                    nvmlEventTypeXidCriticalError,
                    event.xid,
                    event.gpu_instance_id,
                    event.compute_instance_id,
                )
            if time.monotonic() >= deadline:
                raise _fail(NVML_ERROR_TIMEOUT)
            time.sleep(0.05)  # a blocking wait in the real library; poll the state file meanwhile

    def nvmlEventSetWait_v2(self, eventSet: _EventSet, timeoutms: int) -> _EventData:  # noqa: N802, N803
        return self.nvmlEventSetWait(eventSet, timeoutms)

    def nvmlEventSetFree(self, eventSet: _EventSet) -> None:  # noqa: N802, N803
        eventSet.registered.clear()


_default_lock = threading.Lock()
_default: FakeNvml | None = None


def _module_instance() -> FakeNvml:
    """The instance behind the module-level functions, bound to the file in GPUOP_FAKE_NVML_STATE."""
    global _default
    with _default_lock:
        path_text = os.environ.get(STATE_ENV, "")
        path = Path(path_text) if path_text else None
        if _default is None or _default._path != path:
            _default = FakeNvml(path=path) if path is not None else FakeNvml(state=None)
        return _default


def _delegate(name: str) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(_module_instance(), name)(*args, **kwargs)

    call.__name__ = name
    return call


for _name in [n for n in dir(FakeNvml) if n.startswith("nvml")]:
    globals()[_name] = _delegate(_name)
