"""The simulated amdgpu driver: partition writes re-lay KFD/DRM, refuse like the kernel (EINVAL/EBUSY)."""

from __future__ import annotations

import errno

import pytest
from gpuop_common.gpu import AmdSysfsBackend, PartitionWriteError
from gpuop_common.gpu.amd_smi import AmdSmiWriter
from gpuop_common.gpu.amd_topology import KFD_TOPOLOGY, read_topology
from gpuop_common.gpu.hostcmd import HostCommands, host_exec_argv
from gpuop_sim import drivertree, hostfakes
from gpuop_sim.nodes import amd_driver, hold_open
from gpuop_sim.nodes.faults import amd_device_dir


def _backend(info):
    return AmdSysfsBackend(info.root, writer=amd_driver.write_attr)


def _generation(info) -> int:
    return int((info.root / KFD_TOPOLOGY / "generation_id").read_text())


def _links(root):
    return {
        n.index: sorted((lk.node_to, lk.link_type, lk.weight, lk.max_bandwidth) for lk in n.io_links)
        for n in read_topology(root)
    }


def test_spx_to_cpx_and_back_relays_kfd_drm_and_bumps_generation(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    before_nodes = {n.index: n.props for n in read_topology(info.root)}
    before_links = _links(info.root)
    backend = _backend(info)
    gpus = backend.enumerate()
    generation = _generation(info)
    for gpu in gpus:
        assert backend.set_partition_mode(gpu.id, "CPX").compute == "CPX"
    assert _generation(info) > generation
    after = backend.enumerate()
    assert [len(g.partitions) for g in after] == [8] * 8
    assert all(p.compute_units == 38 for g in after for p in g.partitions)
    renders = sorted((info.root / "dev/dri").glob("renderD*"))
    assert len(renders) == 64
    assert len(list((info.root / "sys/devices/platform").glob("amdgpu_xcp_*"))) == 56
    ids = {p.id for g in after for p in g.partitions}
    assert len(ids) == 64 and "amdgpu_xcp_55" in ids
    # Back to SPX: the topology is the one the SPX profile was built with.
    for gpu in after:
        backend.set_partition_mode(gpu.id, "SPX")
    assert {n.index: n.props for n in read_topology(info.root)} == before_nodes
    assert _links(info.root) == before_links
    assert not list((info.root / "sys/devices/platform").glob("amdgpu_xcp_*"))
    assert len(list((info.root / "dev/dri").glob("renderD*"))) == 8


def _reload(info) -> None:
    for args in (["-r", "amdgpu"], ["amdgpu"]):
        assert hostfakes.modprobe(info.root, args) == 0


def test_cpx_nps4_capture_to_spx_nps1_takes_the_memory_partition_at_the_driver_reload(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    backend = _backend(info)
    gpu = backend.enumerate()[0]
    generation = _generation(info)
    # NPS1 first (SPX is refused while NPS4 is in force): the driver takes it as a request.
    state = backend.set_partition_mode(gpu.id, "spx_nps1")
    assert (state.compute, state.memory, state.pending_memory) == ("CPX", "NPS4", "NPS1")
    assert amd_driver.SimAmdDriver(info.root).pending_memory() == {gpu.pci_address: "NPS1"}
    assert _generation(info) == generation  # nothing re-laid yet
    _reload(info)
    backend = _backend(info)
    assert backend.get_partition_mode(gpu.id).memory == "NPS1" and _generation(info) > generation
    assert amd_driver.SimAmdDriver(info.root).pending_memory() == {}
    state = backend.set_partition_mode(gpu.id, "spx_nps1")  # now SPX is accepted
    assert (state.compute, state.memory, state.pending_memory) == ("SPX", "NPS1", None)
    gpus = backend.enumerate()
    assert gpus[0].partitions == () and gpus[0].compute_units == 304
    # The other GPUs keep their CPX partitions (the capture's last GPU has 7, the box has 8 XCCs each).
    assert [len(g.partitions) for g in gpus[1:]] == [8] * 7
    state = backend.set_partition_mode(gpu.id, "cpx_nps4")  # CPX at once, NPS4 at the next reload
    assert (state.key, state.pending_memory) == ("cpx_nps1", "NPS4")
    assert len(backend.enumerate()[0].partitions) == 8
    _reload(info)
    assert _backend(info).get_partition_mode(gpu.id).key == "cpx_nps4"


def test_writing_the_memory_partition_in_force_cancels_the_request(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    device = amd_device_dir(info.root, "0000:05:00.0")
    amd_driver.write_attr(device / "current_memory_partition", "NPS1")
    assert amd_driver.SimAmdDriver(info.root).pending_memory() == {"0000:05:00.0": "NPS1"}
    amd_driver.write_attr(device / "current_memory_partition", "nps4")
    assert amd_driver.SimAmdDriver(info.root).pending_memory() == {}
    _reload(info)
    assert (device / "current_memory_partition").read_text().strip() == "NPS4"


def test_a_pending_memory_partition_comes_into_force_at_boot_too(gpu_node_root):
    info = gpu_node_root("amd-mi300x-cpx")
    device = amd_device_dir(info.root, "0000:05:00.0")
    amd_driver.write_attr(device / "current_memory_partition", "NPS1")
    hostfakes.boot(info.root)
    assert (device / "current_memory_partition").read_text().strip() == "NPS1"


def test_unloading_the_driver_while_a_device_node_is_open_is_refused(gpu_node_root, capsys):
    info = gpu_node_root("amd-mi300x-cpx")
    with hold_open(info.root, "/dev/kfd"):
        assert hostfakes.modprobe(info.root, ["-r", "amdgpu"]) == 1
        assert "Module amdgpu is in use" in capsys.readouterr().err
        assert drivertree.is_loaded(info.root, "amdgpu")
    assert hostfakes.modprobe(info.root, ["-r", "amdgpu"]) == 0
    assert not drivertree.is_loaded(info.root, "amdgpu")
    assert not (info.root / KFD_TOPOLOGY).exists()  # the GPUs' driver files are gone until the load


def test_the_fakes_name_the_driver_state_file_of_the_driver():
    assert hostfakes.AMD_DRIVER_STATE == amd_driver.DRIVER_STATE


@pytest.mark.parametrize(
    ("attr", "value"),
    [
        ("current_compute_partition", "TPX"),  # not in available_compute_partition
        ("current_compute_partition", "garbage"),
        ("current_compute_partition", "SPX"),  # refused while NPS4 is in force
        ("current_memory_partition", "NPS2"),  # not available on MI300X
        ("current_memory_partition", "NPS9"),
    ],
)
def test_invalid_write_is_einval_and_changes_nothing(gpu_node_root, attr, value):
    info = gpu_node_root("amd-mi300x-cpx")
    ddir = amd_device_dir(info.root, info.pci_addresses[0])
    generation = _generation(info)
    with pytest.raises(OSError) as excinfo:
        amd_driver.write_attr(ddir / attr, value)
    assert excinfo.value.errno == errno.EINVAL
    assert (ddir / "current_compute_partition").read_text().strip() == "CPX"
    assert (ddir / "current_memory_partition").read_text().strip() == "NPS4"
    assert _generation(info) == generation


def test_open_render_node_makes_that_gpu_busy(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    backend = _backend(info)
    gpus = backend.enumerate()
    with hold_open(info.root, f"/dev/dri/renderD{gpus[0].render_minor}"):
        with pytest.raises(PartitionWriteError) as excinfo:
            backend.set_partition_mode(gpus[0].id, "CPX")
        assert excinfo.value.errno_name == "EBUSY"
        assert backend.get_partition_mode(gpus[0].id).compute == "SPX"
        assert backend.set_partition_mode(gpus[1].id, "CPX").compute == "CPX"
    assert backend.set_partition_mode(gpus[0].id, "CPX").compute == "CPX"


def test_open_kfd_makes_every_gpu_busy(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    ddir = amd_device_dir(info.root, info.pci_addresses[3])
    handle = hold_open(info.root, "/dev/kfd")
    with pytest.raises(OSError) as excinfo:
        amd_driver.write_attr(ddir / "current_compute_partition", "DPX")
    assert excinfo.value.errno == errno.EBUSY
    handle.close()
    amd_driver.write_attr(ddir / "current_compute_partition", "dpx\n")
    assert len(_backend(info).enumerate()[3].partitions) == 2


def test_same_mode_is_accepted_without_a_rebuild(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    ddir = amd_device_dir(info.root, info.pci_addresses[0])
    generation = _generation(info)
    amd_driver.write_attr(ddir / "current_compute_partition", "SPX")
    assert _generation(info) == generation


def test_other_files_and_roots_without_the_driver_are_plain_writes(gpu_node_root):
    info = gpu_node_root("amd-mi210x8")
    ddir = amd_device_dir(info.root, info.pci_addresses[0])
    amd_driver.write_attr(ddir / "power_dpm_force_performance_level", "manual")
    assert (ddir / "power_dpm_force_performance_level").read_text() == "manual\n"
    with pytest.raises(FileNotFoundError):
        hold_open(info.root, "/dev/dri/renderD999")


def test_profile_env_names_the_driver(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    assert info.env["GPUOP_SYSFS_WRITER"] == amd_driver.WRITER_SPEC


# -- the same driver through the host's `amd-smi set` (gpuop_common.gpu.amd_smi) ----------------------


def _smi_backend(info):
    prefix = tuple(host_exec_argv(hostfakes.host_exec_for(info.root), str(info.root)))
    return AmdSysfsBackend(info.root, writer=AmdSmiWriter(HostCommands(prefix, 120)))


def _smi_calls(info):
    return [c for c in hostfakes.recorded(info.root) if c[:2] == ["amd-smi", "set"]]


def test_amd_smi_set_partitions_through_the_driver_and_a_memory_mode_waits_for_the_reload(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    backend = _smi_backend(info)
    gpu = backend.enumerate()[0]
    generation = _generation(info)
    state = backend.set_partition_mode(gpu.id, "CPX_NPS4")
    assert (state.compute, state.memory, state.pending_memory) == ("CPX", "NPS1", "NPS4")
    assert _generation(info) > generation
    assert _smi_calls(info) == [
        ["amd-smi", "set", "--gpu", gpu.pci_address, "--compute-partition", "CPX"],
        ["amd-smi", "set", "--gpu", gpu.pci_address, "--memory-partition", "NPS4"],
    ]
    assert len(backend.enumerate()[0].partitions) == 8
    _reload(info)
    assert backend.get_partition_mode(gpu.id).memory == "NPS4"


def test_amd_smi_busy_gpu_is_ebusy_naming_the_command_and_changes_nothing(gpu_node_root):
    info = gpu_node_root("amd-mi300x-spx")
    backend = _smi_backend(info)
    first, second = backend.enumerate()[:2]
    hostfakes.busy(info.root, first.pci_address)  # the tool's own check: a process holds the GPU
    with pytest.raises(PartitionWriteError) as raised:
        backend.set_partition_mode(first.id, "CPX")
    assert raised.value.errno_name == "EBUSY"
    assert f"via amd-smi set --gpu {first.pci_address} --compute-partition CPX" in str(raised.value)
    assert "AMDSMI_STATUS_BUSY" in str(raised.value)
    render = f"/dev/dri/renderD{second.render_minor}"  # the driver's check: a device node is open
    with hold_open(info.root, render), pytest.raises(PartitionWriteError) as raised:
        backend.set_partition_mode(second.id, "CPX")
    assert raised.value.errno_name == "EBUSY"
    assert [g.partition.compute for g in backend.enumerate()[:2] if g.partition] == ["SPX", "SPX"]


@pytest.mark.parametrize(
    ("args", "code", "words"),
    [
        (["--gpu", "0", "--compute-partition", "XPX"], errno.EINVAL, "AMDSMI_STATUS_INVAL"),
        (["--gpu", "9", "--compute-partition", "CPX"], 2, "Invalid GPU ID(s): 9"),
        (["--gpu", "0"], 2, "sets one of --compute-partition, --memory-partition"),
    ],
)
def test_amd_smi_set_refusals(gpu_node_root, capsys, args, code, words):
    info = gpu_node_root("amd-mi300x-spx")
    assert hostfakes.amd_smi(info.root, ["set", *args]) == code
    assert words in capsys.readouterr().err
    assert {g.partition.compute for g in AmdSysfsBackend(info.root).enumerate() if g.partition} == {"SPX"}
