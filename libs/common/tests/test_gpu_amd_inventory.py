"""AMD inventory read from the simulated node roots (real KFD captures + project-written sysfs)."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
from gpuop_common.gpu import AmdSysfsBackend, LinkType, Vendor

MI210_BDFS = [
    "0000:03:00.0", "0000:26:00.0", "0000:43:00.0", "0000:63:00.0",
    "0000:83:00.0", "0000:a3:00.0", "0000:c3:00.0", "0000:e3:00.0",
]  # fmt: skip
MI300X_BDFS = [
    "0000:05:00.0", "0000:27:00.0", "0000:47:00.0", "0000:65:00.0",
    "0000:85:00.0", "0000:a7:00.0", "0000:c7:00.0", "0000:e5:00.0",
]  # fmt: skip


def test_mi210_devices_pci_vram_and_ids(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    gpus = AmdSysfsBackend(info.root).enumerate()
    assert [g.pci_address for g in gpus] == MI210_BDFS
    assert [g.index for g in gpus] == list(range(8))
    first = gpus[0]
    assert first.vendor is Vendor.AMD
    assert first.model == "AMD Instinct MI210"
    assert first.product_name == "Instinct MI210"
    assert (first.pci.vendor_id, first.pci.device_id) == (0x1002, 0x740F)
    assert first.pci.subsystem_device_id == 0x0C34
    assert first.architecture == "gfx90a" and first.family == "AI"
    assert first.gfx_target_version == 90010
    assert first.vram_total_bytes == 64 * 1024**3
    assert first.compute_units == 104 and first.simd_count == 416
    assert first.driver_version == "6.10.5"
    assert first.vbios_version == "113-D67301-063"
    # 0000:03:00.0 is KFD node 4 (location_id 768): unique_id 10645161697164847644, renderD130.
    assert first.id == f"{10645161697164847644:016x}"
    assert first.render_minor == 130 and first.card_minor == 2
    assert first.device_nodes == ("/dev/kfd", "/dev/dri/card2", "/dev/dri/renderD130")
    assert first.partition is None and first.partitions == ()
    assert len({g.id for g in gpus}) == 8


def test_mi210_xgmi_hives_follow_the_capture(gpu_node_root):
    gpus = AmdSysfsBackend(gpu_node_root("amd-mi210x8").root).enumerate()
    hives = Counter(g.hive_id for g in gpus)
    assert hives == {"12609507387757274807": 4, "18091350218769748594": 4}
    by_id = {g.id: g for g in gpus}
    for gpu in gpus:
        xgmi = [link for link in gpu.links if link.link_type is LinkType.XGMI]
        assert len(xgmi) == 3
        assert {by_id[link.peer_id].hive_id for link in xgmi} == {gpu.hive_id}
        assert all(link.weight == 15 and link.hops == 1 for link in xgmi)
        # The other hive is reached through PCIe p2p links (weights 52 / 72 in the capture).
        pcie = [link for link in gpu.links if link.link_type is LinkType.PCIE]
        assert len(pcie) == 4
        assert {by_id[link.peer_id].hive_id for link in pcie} == {h for h in hives if h != gpu.hive_id}
        assert all(link.hops == 2 and link.weight in (52, 72) for link in pcie)


def test_mi210_numa_from_cpu_links(gpu_node_root):
    gpus = AmdSysfsBackend(gpu_node_root("amd-mi210x8").root).enumerate()
    by_hive = {g.hive_id: set() for g in gpus}
    for gpu in gpus:
        by_hive[gpu.hive_id].add(gpu.numa_node)
    assert sorted(map(sorted, by_hive.values())) == [[0], [1]]


def test_mi300x_cpx_partitions(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    gpus = AmdSysfsBackend(info.root).enumerate()
    assert [g.pci_address for g in gpus] == MI300X_BDFS
    # The capture holds 63 KFD GPU nodes: 8 partitions on 7 GPUs, 7 on the last one.
    assert [len(g.partitions) for g in gpus] == [8] * 7 + [7]
    assert sum(len(g.partitions) for g in gpus) == 63 == info.partition_count
    first = gpus[0]
    assert first.model == "AMD Instinct MI300X" and first.architecture == "gfx942"
    assert first.partition is not None
    assert (first.partition.compute, first.partition.memory) == ("CPX", "NPS4")
    assert first.partition.available_compute == ("SPX", "DPX", "QPX", "CPX")
    assert first.partition.available_memory == ("NPS1", "NPS4")
    assert first.partition.key == "cpx_nps4"
    assert first.vram_total_bytes == 192 * 1024**3
    assert first.compute_units == 8 * 38
    parts = first.partitions
    assert [p.index for p in parts] == list(range(8))
    assert [p.render_minor for p in parts] == list(range(128, 136))
    assert parts[0].id == "0000:05:00.0"
    assert [p.id for p in parts[1:]] == [f"amdgpu_xcp_{n}" for n in range(7)]
    assert parts[3].device_nodes == ("/dev/kfd", "/dev/dri/card3", "/dev/dri/renderD131")
    assert all(p.compute_units == 38 and p.simd_count == 152 for p in parts)
    assert all(p.memory_bytes == 192 * 1024**3 // 8 for p in parts)
    all_ids = [p.id for g in gpus for p in g.partitions]
    assert len(set(all_ids)) == 63
    assert {g.hive_id for g in gpus} == {"15188982192727901047"}


def test_mi300x_cpx_links_are_xgmi_between_all_gpus(gpu_node_root):
    gpus = AmdSysfsBackend(gpu_node_root("amd-mi300x-cpx").root).enumerate()
    for gpu in gpus:
        assert len(gpu.links) == 7
        assert all(link.link_type is LinkType.XGMI and link.weight == 41 for link in gpu.links)


def test_mi300x_spx(gpu_node_root):
    gpus = AmdSysfsBackend(gpu_node_root("amd-mi300x-spx").root).enumerate()
    assert [g.pci_address for g in gpus] == MI300X_BDFS
    assert all(g.partitions == () for g in gpus)
    assert all(g.partition is not None and g.partition.key == "spx_nps1" for g in gpus)
    assert all(g.compute_units == 304 for g in gpus)
    assert [g.render_minor for g in gpus] == [128 + 8 * i for i in range(8)]
    assert all(len(g.links) == 7 and g.links[0].link_type is LinkType.XGMI for g in gpus)


def test_single_gpu_capture_duplicate_node_is_dropped(gpu_node_root, caplog):
    info = gpu_node_root("amd-single")
    with caplog.at_level(logging.WARNING):
        gpus = AmdSysfsBackend(info.root).enumerate()
    assert len(gpus) == 1 == info.gpu_count
    gpu = gpus[0]
    assert gpu.pci_address == "0000:19:00.0"
    assert gpu.kfd_nodes == (1,)
    assert gpu.render_minor == 128
    assert gpu.id == f"{14073402507705256556:016x}"
    assert gpu.model == "AMD Radeon Instinct MI25"
    # No gfx_target_version in this old-kernel capture: the PCI id table supplies gfx900.
    assert gpu.gfx_target_version == 90000 and gpu.architecture == "gfx900"
    assert gpu.vram_total_bytes == 17163091968
    assert gpu.product_name is None
    assert any("nodes/2" in r.getMessage() and "duplicates" in r.getMessage() for r in caplog.records)


def test_radeon_workstation_gpu(gpu_node_root):
    gpus = AmdSysfsBackend(gpu_node_root("amd-radeon").root).enumerate()
    assert len(gpus) == 1
    gpu = gpus[0]
    assert gpu.model == "AMD Radeon Pro W7900"
    assert gpu.product_name == "Radeon PRO W7900"
    assert gpu.pci.device_id == 0x7448
    assert gpu.architecture == "gfx1100" and gpu.family == "GC_11_0_0"
    assert gpu.compute_units == 96
    assert gpu.vram_total_bytes == 48 * 1024**3
    assert gpu.partition is None and gpu.hive_id is None and gpu.links == ()


@pytest.mark.parametrize(
    "profile", ["amd-mi210x8", "amd-mi300x-cpx", "amd-mi300x-spx", "amd-single", "amd-radeon"]
)
def test_every_amd_profile_matches_its_node_root_info(gpu_node_root, profile):
    info = gpu_node_root(profile)
    gpus = AmdSysfsBackend(info.root).enumerate()
    assert len(gpus) == info.gpu_count
    assert tuple(g.pci_address for g in gpus) == info.pci_addresses
    for gpu in gpus:
        for node in gpu.device_nodes:
            assert (info.root / node.lstrip("/")).exists()
