"""AMD telemetry from amdgpu sysfs + hwmon; each unreadable reading becomes a FieldError, never a raise."""

from __future__ import annotations

from pathlib import Path

from gpuop_common.gpu.amd_inventory import AmdGpuSource
from gpuop_common.gpu.models import EccCounts, FieldErrorKind, GpuTelemetry, PcieReading, TempSensor
from gpuop_common.gpu.sysfs import (
    FieldReader,
    list_dir,
    parse_dpm,
    parse_int,
    parse_link_speed,
    parse_pcie_bw,
    parse_ras_count,
    read_optional,
)

# Blocks rocm-smi reads plus the rest of the kernel's table; only files that exist are reported.
RAS_BLOCKS = (
    *("umc", "sdma", "gfx", "mmhub", "athub", "pcie_bif", "hdp", "xgmi_wafl", "df", "smn"),
    *("sem", "mp0", "mp1", "fuse", "mca", "vcn", "jpeg", "ih", "mpio"),
)
_TEMP_LABELS = {"edge": TempSensor.EDGE, "junction": TempSensor.JUNCTION, "mem": TempSensor.MEMORY}


def find_hwmon(device_dir: Path) -> Path | None:
    """The amdgpu hwmon dir: the index K is global and unstable, so match on `name`."""
    for entry in list_dir(device_dir / "hwmon"):
        if read_optional(entry / "name", str) == "amdgpu":
            return entry
    return None


def _temperatures(reader: FieldReader, hwmon: Path) -> dict[TempSensor, float]:
    temps: dict[TempSensor, float] = {}
    seen: set[str] = set()
    for label_file in sorted(hwmon.glob("temp*_label")):
        label = read_optional(label_file, str)
        sensor = _TEMP_LABELS.get(label or "")
        if sensor is None or label is None:
            continue
        seen.add(label)
        channel = label_file.name.removesuffix("_label")
        value = reader.read(f"temperature.{sensor}", hwmon / f"{channel}_input", parse_int)
        if value is not None:
            temps[sensor] = value / 1000.0
    for label, sensor in _TEMP_LABELS.items():
        if label not in seen:
            reader.fail(f"temperature.{sensor}", FieldErrorKind.MISSING, str(hwmon / "temp*_label"), label)
    return temps


def _micro(value: int | None) -> float | None:
    return value / 1_000_000.0 if value is not None else None


def _pcie(reader: FieldReader, ddir: Path) -> PcieReading:
    current = reader.read("pcie.current_link_speed", ddir / "current_link_speed", parse_link_speed)
    maximum = reader.read("pcie.max_link_speed", ddir / "max_link_speed", parse_link_speed)
    bw = reader.read("pcie.bandwidth", ddir / "pcie_bw", parse_pcie_bw)
    return PcieReading(
        current_gen=current[1] if current else None,
        current_speed_gts=current[0] if current else None,
        current_width=reader.read("pcie.current_link_width", ddir / "current_link_width", parse_int),
        max_gen=maximum[1] if maximum else None,
        max_speed_gts=maximum[0] if maximum else None,
        max_width=reader.read("pcie.max_link_width", ddir / "max_link_width", parse_int),
        rx_bytes_per_s=float(bw[0] * bw[2]) if bw else None,
        tx_bytes_per_s=float(bw[1] * bw[2]) if bw else None,
        replay_count=reader.read("pcie.replay_count", ddir / "pcie_replay_count", parse_int),
    )


def read_ras(reader: FieldReader, ddir: Path) -> dict[str, EccCounts]:
    ras_dir = ddir / "ras"
    if not ras_dir.is_dir():
        reader.fail("ecc", FieldErrorKind.MISSING, str(ras_dir))
        return {}
    result: dict[str, EccCounts] = {}
    for block in RAS_BLOCKS:
        path = ras_dir / f"{block}_err_count"
        if not path.exists():
            continue
        counts = reader.read(f"ecc.{block}", path, parse_ras_count)
        if counts is not None:
            result[block] = EccCounts(counts.get("ce"), counts.get("ue"), counts.get("de"))
    return result


def _clock(
    reader: FieldReader, ddir: Path, hwmon: Path | None, *, name: str, dpm: str, freq: str
) -> float | None:
    """Current level of `pp_dpm_*`; hwmon `freqN_input` (Hz) when the DPM file is absent."""
    dpm_path = ddir / dpm
    if dpm_path.exists() or hwmon is None or not (hwmon / freq).exists():
        levels = reader.read(name, dpm_path, parse_dpm)
        return float(levels.current_mhz) if levels and levels.current_mhz is not None else None
    hz = reader.read(name, hwmon / freq, parse_int)
    return hz / 1_000_000.0 if hz is not None else None


def read_telemetry(gpu_id: str, source: AmdGpuSource, xgmi_peers: int | None) -> GpuTelemetry:
    """`xgmi_peers`: peer GPUs reached by a direct XGMI link (KFD io_links), reported as link_count."""
    reader = FieldReader(gpu_id)
    ddir = source.device_dir
    if ddir is None or not ddir.is_dir():
        reader.fail("device", FieldErrorKind.MISSING, str(ddir) if ddir else source.bdf)
        return GpuTelemetry(gpu_id=gpu_id, errors=tuple(reader.errors))
    hwmon = find_hwmon(ddir)
    temps: dict[TempSensor, float] = {}
    power = power_avg = cap = energy = None
    if hwmon is None:
        reader.fail("hwmon", FieldErrorKind.MISSING, str(ddir / "hwmon"))
    else:
        temps = _temperatures(reader, hwmon)
        power = _micro(reader.read("power.current", hwmon / "power1_input", parse_int))
        power_avg = _micro(reader.read("power.average", hwmon / "power1_average", parse_int))
        cap = _micro(reader.read("power.cap", hwmon / "power1_cap", parse_int))
        energy = _micro(reader.read("energy", hwmon / "energy1_input", parse_int))
    total = reader.read("vram.total", ddir / "mem_info_vram_total", parse_int)
    used = reader.read("vram.used", ddir / "mem_info_vram_used", parse_int)
    busy = reader.read("gpu_util", ddir / "gpu_busy_percent", parse_int)
    mem_busy = reader.read("memory_util", ddir / "mem_busy_percent", parse_int)
    sclk = _clock(reader, ddir, hwmon, name="clock.shader", dpm="pp_dpm_sclk", freq="freq1_input")
    mclk = _clock(reader, ddir, hwmon, name="clock.memory", dpm="pp_dpm_mclk", freq="freq2_input")
    return GpuTelemetry(
        gpu_id=gpu_id,
        temperatures_c=temps,
        power_w=power,
        power_average_w=power_avg,
        power_cap_w=cap,
        energy_j=energy,
        gpu_util_percent=float(busy) if busy is not None else None,
        memory_util_percent=float(mem_busy) if mem_busy is not None else None,
        vram_total_bytes=total,
        vram_used_bytes=used,
        vram_free_bytes=total - used if total is not None and used is not None else None,
        shader_clock_mhz=sclk,
        memory_clock_mhz=mclk,
        pcie=_pcie(reader, ddir),
        ecc=read_ras(reader, ddir),
        link_count=xgmi_peers,
        errors=tuple(reader.errors),
    )
