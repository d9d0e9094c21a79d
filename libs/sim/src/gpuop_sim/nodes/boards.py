"""Board values of the simulated GPUs: realistic for each product, chosen by the project.

AMD values follow the formats and per-ASIC asymmetries of amdgpu-sysfs.md (MI300: no edge temperature,
only power1_input, no fan; consumer/workstation Radeon: no RAS); NVIDIA values are H100 SXM5 80GB-like.
"""

from __future__ import annotations

import uuid

from gpuop_sim.nodes import fake_nvml_mig
from gpuop_sim.nodes.amd_root import AmdBoard
from gpuop_sim.nodes.nvml_state import GpuState, MigDeviceState, NvmlState

GIB = 1024**3
MIB = 1024**2
_RAS_INSTINCT = dict.fromkeys(("umc", "sdma", "gfx", "mmhub", "pcie_bif", "hdp", "xgmi_wafl"), (0, 0))

MI210 = AmdBoard(
    subsystem_vendor=0x1002, subsystem_device=0x0C34, revision=0x02, pci_class=0x038000,
    vram_total=64 * GIB, vram_used=12 * MIB, vbios="113-D67301-063", product_name="Instinct MI210",
    serial_prefix="PCB052077", link_speed="16.0 GT/s PCIe", link_width=16,
    sclk_dpm="0: 500Mhz \n1: 800Mhz *\n2: 1700Mhz ", mclk_dpm="0: 1600Mhz *",
    temps_milli_c={"edge": 38000, "junction": 42000, "mem": 45000},
    power_average_uw=42_000_000, power_input_uw=None, power_cap_uw=300_000_000,
    freq_sclk_hz=800_000_000, freq_mclk_hz=1_600_000_000, gpu_busy=12, mem_busy=3,
    pcie_bw="1234 5678 256", ras_ue_ce=_RAS_INSTINCT,
)  # fmt: skip

MI300X_CPX = AmdBoard(
    subsystem_vendor=0x1002, subsystem_device=0x74A1, revision=0x00, pci_class=0x120000,
    vram_total=192 * GIB, vram_used=300 * MIB, vbios="113-M3000100-102", product_name="Instinct MI300X OAM",
    serial_prefix="692251001", link_speed="32.0 GT/s PCIe", link_width=16,
    sclk_dpm="0: 500Mhz \n1: 1300Mhz *\n2: 2100Mhz ", mclk_dpm="0: 900Mhz \n1: 1300Mhz *",
    temps_milli_c={"junction": 45000, "mem": 40000},
    power_average_uw=None, power_input_uw=150_000_000, power_cap_uw=750_000_000,
    freq_sclk_hz=1_300_000_000, freq_mclk_hz=1_300_000_000, gpu_busy=20, mem_busy=5,
    pcie_bw=None, ras_ue_ce=_RAS_INSTINCT,
    compute_partition="CPX", available_compute="SPX, DPX, QPX, CPX",
    memory_partition="NPS4", available_memory="NPS1, NPS4",
)  # fmt: skip

MI300X_SPX = AmdBoard(
    **{**MI300X_CPX.__dict__, "compute_partition": "SPX", "memory_partition": "NPS1"},
)

MI25 = AmdBoard(
    subsystem_vendor=0x1002, subsystem_device=0x0C35, revision=0x00, pci_class=0x038000,
    vram_total=17163091968, vram_used=8 * MIB, vbios="113-D0513700-001", product_name=None,
    serial_prefix=None, link_speed="8.0 GT/s PCIe", link_width=16,
    sclk_dpm="0: 852Mhz \n1: 991Mhz \n2: 1138Mhz \n3: 1269Mhz \n4: 1348Mhz \n5: 1440Mhz \n6: 1500Mhz *",
    mclk_dpm="0: 167Mhz \n1: 500Mhz \n2: 800Mhz \n3: 945Mhz *",
    temps_milli_c={"edge": 30000, "junction": 33000, "mem": 31000},
    power_average_uw=25_000_000, power_input_uw=None, power_cap_uw=220_000_000,
    freq_sclk_hz=1_500_000_000, freq_mclk_hz=945_000_000, gpu_busy=0, mem_busy=0,
    pcie_bw="100 200 128", ras_ue_ce=None, driver_version="5.18.13",
)  # fmt: skip

W7900 = AmdBoard(
    subsystem_vendor=0x1002, subsystem_device=0x0E0D, revision=0x00, pci_class=0x030000,
    vram_total=48 * GIB, vram_used=512 * MIB, vbios="113-D7070100-100", product_name="Radeon PRO W7900",
    serial_prefix=None, link_speed="16.0 GT/s PCIe", link_width=16,
    sclk_dpm="0: 500Mhz \n1: 1200Mhz *\n2: 2495Mhz ", mclk_dpm="0: 96Mhz \n1: 1124Mhz *",
    temps_milli_c={"edge": 35000, "junction": 40000, "mem": 38000},
    power_average_uw=30_000_000, power_input_uw=31_000_000, power_cap_uw=295_000_000,
    freq_sclk_hz=1_200_000_000, freq_mclk_hz=1_124_000_000, gpu_busy=4, mem_busy=1,
    pcie_bw="2000 1500 256", fan_rpm=800, ras_ue_ce=None,
)  # fmt: skip

# DGX H100 PCI layout: four GPUs per CPU socket.
H100_BUS_IDS = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
H100_MEMORY = 81559 * MIB


def _uuid(kind: str, *parts: object) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "gpuop-sim/" + "/".join(str(p) for p in parts))).join(
        (kind, "")
    )


def h100(index: int, node: str) -> GpuState:
    return GpuState(
        uuid=_uuid("GPU-", node, index),
        name="NVIDIA H100 80GB HBM3",
        bus_id=f"00000000:{H100_BUS_IDS[index]}:00.0",
        pci_device_id=(0x2330 << 16) | 0x10DE,
        pci_subsystem_id=(0x16C1 << 16) | 0x10DE,
        minor_number=index,
        serial=f"165232{index:07d}",
        vbios_version="96.00.74.00.0D",
        numa_node=0 if index < 4 else 1,
        compute_capability=(9, 0),
        architecture=9,
        multiprocessor_count=132,
        memory_total=H100_MEMORY,
        memory_used=(512 + index) * MIB,
        temperature_c=33 + index,
        memory_temperature_c=30 + index,
        power_mw=70_000 + index * 1000,
        power_average_mw=69_000 + index * 1000,
        power_limit_mw=700_000,
        energy_mj=123_456_789 + index,
        util_gpu=index * 10,
        util_memory=index * 2,
        sm_clock_mhz=1980,
        mem_clock_mhz=2619,
        pcie_gen=5,
        pcie_width=16,
        pcie_max_gen=5,
        pcie_max_width=16,
        pcie_tx_kbs=1000 + index,
        pcie_rx_kbs=2000 + index,
        nvlink_tx_kib_per_link=100 * (index + 1),
        nvlink_rx_kib_per_link=200 * (index + 1),
    )


def mig_devices(gpu: GpuState, node: str, profiles: list[str]) -> list[MigDeviceState]:
    """Create GPU instances (first free placement) and one full compute instance each."""
    for slot, profile in enumerate(profiles):
        instance = fake_nvml_mig.add_gpu_instance(gpu, fake_nvml_mig.profile_named(profile))
        if instance is None:
            raise ValueError(f"GPU {gpu.uuid}: MIG layout {profiles} does not fit")
        fake_nvml_mig.add_compute_instance(gpu, instance, _uuid("MIG-", node, gpu.uuid, slot))
    return gpu.mig_devices


def h100x8_state(node: str, mig: dict[int, list[str]] | None = None) -> NvmlState:
    gpus = [h100(i, node) for i in range(8)]
    for index, profiles in (mig or {}).items():
        gpus[index].mig_current = gpus[index].mig_pending = 1
        gpus[index].mig_devices = mig_devices(gpus[index], node, profiles)
    return NvmlState(driver_version="550.54.15", cuda_driver_version=12040, gpus=gpus)
