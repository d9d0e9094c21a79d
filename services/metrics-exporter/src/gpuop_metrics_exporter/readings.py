"""Telemetry of one GPU (or partition) as a flat `{reading key: value}` map in the backend's units.

Keys are vendor-neutral and stable (`temperature.junction`, `vram.used`, `ecc.umc.ue`, ...); the
naming sets (naming.py) turn them into metric names and units. A reading the backend could not take
is simply absent, so its series is omitted.
"""

from __future__ import annotations

from gpuop_common.gpu import EccCounts, GpuTelemetry, HealthReason, Vendor
from gpuop_common.gpu.nvml_calls import THROTTLE_REASONS

Readings = dict[str, float]

# Link technology per vendor: telemetry's link_count/link_*_bytes do not say which one they count.
LINK_TYPES = {Vendor.AMD: "xgmi", Vendor.NVIDIA: "nvlink"}
# (reading suffix, EccCounts attribute and neutral `severity` label)
SEVERITIES = (("ce", "correctable"), ("ue", "uncorrectable"), ("de", "deferred"))
# NVML's own aggregate over every memory location; it is the device total, not a block.
NVML_TOTAL_BLOCK = "total"
XID_SOURCE_PREFIX = "nvml:xid:"


def _put(out: Readings, key: str, value: float | int | None) -> None:
    if value is not None:
        out[key] = float(value)


def _ecc(out: Readings, ecc: dict[str, EccCounts]) -> None:
    totals: dict[str, float] = {}
    for block, counts in sorted(ecc.items()):
        for short, attribute in SEVERITIES:
            value = getattr(counts, attribute)
            if value is None:
                continue
            if block == NVML_TOTAL_BLOCK:
                out[f"ecc_total.{short}"] = float(value)
                continue
            out[f"ecc.{block}.{short}"] = float(value)
            totals[short] = totals.get(short, 0.0) + value
    for short, value in totals.items():
        # Sum of the blocks only where the driver gives no total of its own (AMD RAS).
        out.setdefault(f"ecc_total.{short}", value)


def telemetry_readings(tel: GpuTelemetry, vendor: Vendor) -> Readings:
    out: Readings = {}
    for sensor, celsius in tel.temperatures_c.items():
        out[f"temperature.{sensor.value}"] = float(celsius)
    _put(out, "power.current", tel.power_w)
    _put(out, "power.average", tel.power_average_w)
    _put(out, "power.cap", tel.power_cap_w)
    _put(out, "energy", tel.energy_j)
    _put(out, "util.gpu", tel.gpu_util_percent)
    _put(out, "util.memory", tel.memory_util_percent)
    _put(out, "vram.total", tel.vram_total_bytes)
    _put(out, "vram.used", tel.vram_used_bytes)
    _put(out, "vram.free", tel.vram_free_bytes)
    _put(out, "clock.shader", tel.shader_clock_mhz)
    _put(out, "clock.memory", tel.memory_clock_mhz)
    pcie = tel.pcie
    _put(out, "pcie.speed", pcie.current_speed_gts)
    _put(out, "pcie.max_speed", pcie.max_speed_gts)
    _put(out, "pcie.width", pcie.current_width)
    _put(out, "pcie.max_width", pcie.max_width)
    _put(out, "pcie.gen", pcie.current_gen)
    _put(out, "pcie.max_gen", pcie.max_gen)
    _put(out, "pcie.rx", pcie.rx_bytes_per_s)
    _put(out, "pcie.tx", pcie.tx_bytes_per_s)
    _put(out, "pcie.replays", pcie.replay_count)
    if pcie.rx_bytes_per_s is not None and pcie.tx_bytes_per_s is not None:
        # Both directions in Mb/s, the AMD exporter's pcie_bandwidth unit.
        out["pcie.bandwidth"] = (pcie.rx_bytes_per_s + pcie.tx_bytes_per_s) * 8 / 1e6
    _ecc(out, tel.ecc)
    link = LINK_TYPES.get(vendor, "other")
    _put(out, f"link.{link}.count", tel.link_count)
    _put(out, f"link.{link}.rx_bytes", tel.link_rx_bytes)
    _put(out, f"link.{link}.tx_bytes", tel.link_tx_bytes)
    if tel.throttle_reasons is not None:
        active = set(tel.throttle_reasons)
        mask = 0
        for bit, reason in THROTTLE_REASONS.items():
            out[f"throttle.{reason}"] = 1.0 if reason in active else 0.0
            mask |= bit if reason in active else 0
        out["throttle.mask"] = float(mask)
    return out


def last_xid(reasons: tuple[HealthReason, ...]) -> int | None:
    """The most recent critical XID among a GPU's health reasons (dcgm's DCGM_FI_DEV_XID_ERRORS)."""
    for reason in reversed(reasons):
        if reason.source.startswith(XID_SOURCE_PREFIX):
            number = reason.source.removeprefix(XID_SOURCE_PREFIX)
            if number.isdigit():
                return int(number)
    return None
