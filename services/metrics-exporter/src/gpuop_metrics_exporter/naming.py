"""The three metric naming sets: AMD device-metrics-exporter, NVIDIA dcgm-exporter and neutral gpuop_.

Each set maps a reading key (readings.py) to zero or more series: a metric name, a scale factor from
the backend's unit to the set's unit, and extra labels. Vendor sets keep the vendor exporters' names
and units exactly (design/reference/amd-anchor.md section 6, nvidia-anchor.md section 7) so existing
dashboards keep working; the neutral set follows Prometheus conventions (base units in the name,
`_total` on counters).

Vendor names that do not end in `_total` are typed gauge even where the value counts up (energy,
replays, ECC per block): a counter's samples must end in `_total`, and keeping the vendor's exact
name matters more to dashboards than the TYPE line. rate() works on them all the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from gpuop_common.config.metrics_exporter import NamingSet

from gpuop_metrics_exporter.readings import SEVERITIES

Kind = Literal["gauge", "counter"]
Labels = tuple[tuple[str, str], ...]

MIB = 1.0 / (1024 * 1024)


@dataclass(frozen=True, slots=True)
class Family:
    """One exported metric family; counters' `name` ends in `_total` (the sample name)."""

    name: str
    kind: Kind
    help: str


@dataclass(frozen=True, slots=True)
class SeriesSpec:
    name: str
    scale: float = 1.0
    labels: Labels = ()


Resolver = Callable[[str], list[SeriesSpec]]


@dataclass
class NamingTable:
    """Fixed key -> series, plus prefix rules for parametric keys (ecc blocks, throttle reasons)."""

    name: NamingSet
    families: dict[str, Family] = field(default_factory=dict)
    fixed: dict[str, list[SeriesSpec]] = field(default_factory=dict)
    rules: list[tuple[str, Resolver]] = field(default_factory=list)

    def family(self, name: str, kind: Kind, help_text: str) -> None:
        self.families[name] = Family(name, kind, help_text)

    def add(self, key: str, name: str, kind: Kind, help_text: str, scale: float = 1.0, **labels: str) -> None:
        if name not in self.families:
            self.family(name, kind, help_text)
        self.fixed.setdefault(key, []).append(SeriesSpec(name, scale, tuple(sorted(labels.items()))))

    def resolve(self, key: str) -> list[SeriesSpec]:
        if key in self.fixed:
            return self.fixed[key]
        for prefix, rule in self.rules:
            if key.startswith(prefix):
                return rule(key.removeprefix(prefix))
        return []


# --- neutral -------------------------------------------------------------------------------------


def _neutral() -> NamingTable:
    t = NamingTable("neutral")
    for sensor in ("edge", "junction", "memory", "gpu"):
        t.add(
            f"temperature.{sensor}",
            "gpuop_gpu_temperature_celsius",
            "gauge",
            "Temperature of a GPU sensor.",
            sensor=sensor,
        )
    t.add("power.current", "gpuop_gpu_power_watts", "gauge", "Current power draw.")
    t.add("power.average", "gpuop_gpu_power_average_watts", "gauge", "Power draw averaged by the driver.")
    t.add("power.cap", "gpuop_gpu_power_limit_watts", "gauge", "Enforced power limit.")
    t.add("energy", "gpuop_gpu_energy_joules_total", "counter", "Energy used since the driver loaded.")
    t.add("util.gpu", "gpuop_gpu_utilization_ratio", "gauge", "Fraction of time the GPU was busy.", 0.01)
    t.add(
        "util.memory",
        "gpuop_gpu_memory_utilization_ratio",
        "gauge",
        "Fraction of time the memory controller was busy.",
        0.01,
    )
    t.add("vram.total", "gpuop_gpu_memory_total_bytes", "gauge", "Device memory (VRAM) size.")
    t.add("vram.used", "gpuop_gpu_memory_used_bytes", "gauge", "Device memory in use.")
    t.add("vram.free", "gpuop_gpu_memory_free_bytes", "gauge", "Device memory free.")
    t.add("clock.shader", "gpuop_gpu_clock_hertz", "gauge", "Current clock frequency.", 1e6, clock="shader")
    t.add("clock.memory", "gpuop_gpu_clock_hertz", "gauge", "Current clock frequency.", 1e6, clock="memory")
    pcie = "gpuop_gpu_pcie_link_"
    t.add("pcie.speed", pcie + "speed_transfers_per_second", "gauge", "Current PCIe link speed.", 1e9)
    t.add("pcie.max_speed", pcie + "max_speed_transfers_per_second", "gauge", "Maximum PCIe link speed.", 1e9)
    t.add("pcie.width", pcie + "width_lanes", "gauge", "Current PCIe link width.")
    t.add("pcie.max_width", pcie + "max_width_lanes", "gauge", "Maximum PCIe link width.")
    t.add("pcie.gen", pcie + "generation", "gauge", "Current PCIe link generation.")
    t.add("pcie.max_gen", pcie + "max_generation", "gauge", "Maximum PCIe link generation.")
    t.add("pcie.rx", "gpuop_gpu_pcie_receive_bytes_per_second", "gauge", "PCIe receive throughput.")
    t.add("pcie.tx", "gpuop_gpu_pcie_transmit_bytes_per_second", "gauge", "PCIe transmit throughput.")
    t.add("pcie.replays", "gpuop_gpu_pcie_replays_total", "counter", "PCIe link replays.")
    t.add("health", "gpuop_gpu_health", "gauge", "1 when the GPU (partition) is healthy, 0 when not.")
    t.add("xid.last", "gpuop_gpu_last_xid", "gauge", "Most recent critical NVIDIA XID (0: none).")
    t.add("partition.memory", "gpuop_gpu_partition_memory_bytes", "gauge", "Memory of one compute partition.")
    t.add("compute_units", "gpuop_gpu_compute_units", "gauge", "Compute units (SMs) of the GPU or partition.")
    t.family("gpuop_gpu_ecc_errors_total", "counter", "ECC/RAS errors of the whole device.")
    t.family("gpuop_gpu_ecc_block_errors_total", "counter", "ECC/RAS errors per hardware block.")
    t.family("gpuop_gpu_active_links", "gauge", "Active GPU-to-GPU links (XGMI peers, NVLink links).")
    t.family("gpuop_gpu_link_receive_bytes_total", "counter", "Data received over GPU links.")
    t.family("gpuop_gpu_link_transmit_bytes_total", "counter", "Data sent over GPU links.")
    t.family("gpuop_gpu_throttle_active", "gauge", "1 while the clocks are held down for this reason.")
    severity = dict(SEVERITIES)

    def ecc_total(rest: str) -> list[SeriesSpec]:
        return [SeriesSpec("gpuop_gpu_ecc_errors_total", labels=(("severity", severity[rest]),))]

    def ecc_block(rest: str) -> list[SeriesSpec]:
        block, _, short = rest.rpartition(".")
        labels = (("block", block), ("severity", severity[short]))
        return [SeriesSpec("gpuop_gpu_ecc_block_errors_total", labels=labels)]

    def link(rest: str) -> list[SeriesSpec]:
        link_type, _, what = rest.partition(".")
        names = {
            "count": "gpuop_gpu_active_links",
            "rx_bytes": "gpuop_gpu_link_receive_bytes_total",
            "tx_bytes": "gpuop_gpu_link_transmit_bytes_total",
        }
        return [SeriesSpec(names[what], labels=(("link_type", link_type),))] if what in names else []

    def throttle(rest: str) -> list[SeriesSpec]:
        if rest == "mask":
            return []
        return [SeriesSpec("gpuop_gpu_throttle_active", labels=(("reason", rest),))]

    t.rules += [("ecc_total.", ecc_total), ("ecc.", ecc_block), ("link.", link), ("throttle.", throttle)]
    return t


# --- AMD device-metrics-exporter -----------------------------------------------------------------

# Our sysfs RAS block names -> the exporter's field suffixes (it spells the PCIe BIF block `bif`).
AMD_BLOCK_NAMES = {"pcie_bif": "bif"}
AMD_SEVERITY_WORDS = {"ce": "correct", "ue": "uncorrect", "de": "deferred"}
AMD_CLOCK_TYPES = {"clock.shader": "GPU_CLOCK_TYPE_SYSTEM", "clock.memory": "GPU_CLOCK_TYPE_MEMORY"}
AMD_NODE_FAMILY = Family("gpu_nodes_total", "gauge", "Number of GPUs on the node.")


def _amd() -> NamingTable:
    t = NamingTable("amd")
    t.add("temperature.edge", "gpu_edge_temperature", "gauge", "Edge temperature in Celsius.")
    t.add("temperature.junction", "gpu_junction_temperature", "gauge", "Junction (hotspot) temperature in C.")
    t.add("temperature.memory", "gpu_memory_temperature", "gauge", "Memory temperature in Celsius.")
    t.add("power.current", "gpu_package_power", "gauge", "Current socket power in Watts.")
    t.add("power.current", "gpu_power_usage", "gauge", "Power usage in Watts.")
    t.add("power.average", "gpu_average_package_power", "gauge", "Average socket power in Watts.")
    t.add("energy", "gpu_energy_consumed", "gauge", "Accumulated energy consumed in microjoules.", 1e6)
    t.add("util.gpu", "gpu_gfx_activity", "gauge", "Graphics engine activity in percent.")
    t.add("util.memory", "gpu_umc_activity", "gauge", "Memory controller activity in percent.")
    t.add("vram.total", "gpu_total_vram", "gauge", "Total VRAM in MB.", MIB)
    t.add("vram.used", "gpu_used_vram", "gauge", "Used VRAM in MB.", MIB)
    t.add("vram.free", "gpu_free_vram", "gauge", "Free VRAM in MB.", MIB)
    for key, clock_type in AMD_CLOCK_TYPES.items():
        t.add(
            key,
            "gpu_clock",
            "gauge",
            "Current clock frequency in MHz.",
            clock_type=clock_type,
            clock_index="0",
        )
    t.add("pcie.speed", "pcie_speed", "gauge", "Current PCIe speed in GT/s.")
    t.add("pcie.max_speed", "pcie_max_speed", "gauge", "Maximum PCIe speed in GT/s.")
    t.add("pcie.bandwidth", "pcie_bandwidth", "gauge", "Current PCIe bandwidth in Mb/s.")
    t.add("pcie.replays", "pcie_replay_count", "gauge", "PCIe replay count.")
    t.add("health", "gpu_health", "gauge", "GPU health: 1 healthy, 0 unhealthy.")
    for short, word in AMD_SEVERITY_WORDS.items():
        t.add(f"ecc_total.{short}", f"gpu_ecc_{word}_total", "counter", f"ECC errors ({word}), all blocks.")

    def ecc_block(rest: str) -> list[SeriesSpec]:
        block, _, short = rest.rpartition(".")
        name = f"gpu_ecc_{AMD_SEVERITY_WORDS[short]}_{AMD_BLOCK_NAMES.get(block, block)}"
        if name not in t.families:
            t.family(
                name, "gauge", f"{AMD_SEVERITY_WORDS[short].capitalize()} ECC errors in the {block} block."
            )
        return [SeriesSpec(name)]

    t.rules.append(("ecc.", ecc_block))
    return t


# --- NVIDIA dcgm-exporter ------------------------------------------------------------------------


def _dcgm() -> NamingTable:
    t = NamingTable("dcgm")
    t.add("clock.shader", "DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).")
    t.add("clock.memory", "DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).")
    t.add("temperature.memory", "DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).")
    t.add("temperature.gpu", "DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).")
    t.add("power.current", "DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).")
    t.add("power.cap", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W).")
    t.add(
        "energy",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "gauge",
        "Total energy consumption since boot (in mJ).",
        1000.0,
    )
    t.add("pcie.replays", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "gauge", "Total number of PCIe retries.")
    t.add("pcie.gen", "DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "PCIe link generation.")
    t.add("pcie.width", "DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "PCIe link width.")
    t.add("util.gpu", "DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).")
    t.add("util.memory", "DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).")
    t.add("xid.last", "DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.")
    t.add("vram.free", "DCGM_FI_DEV_FB_FREE", "gauge", "Frame buffer memory free (in MiB).", MIB)
    t.add("vram.used", "DCGM_FI_DEV_FB_USED", "gauge", "Frame buffer memory used (in MiB).", MIB)
    t.add("vram.total", "DCGM_FI_DEV_FB_TOTAL", "gauge", "Total frame buffer memory (in MiB).", MIB)
    t.add("ecc_total.ce", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "gauge", "Total single-bit volatile ECC errors.")
    t.add("ecc_total.ue", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "gauge", "Total double-bit volatile ECC errors.")
    t.add(
        "throttle.mask",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "gauge",
        "Current clock event (throttle) reasons, a bitmask.",
    )
    return t


def tables() -> dict[NamingSet, NamingTable]:
    """Fresh tables (the AMD ECC rule registers block families lazily, so do not share them)."""
    return {"neutral": _neutral(), "amd": _amd(), "dcgm": _dcgm()}
