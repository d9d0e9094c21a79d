"""AMD partition pair rules and write ordering (pure), and the one sysfs write path."""

from __future__ import annotations

import errno

import pytest
from gpuop_common.gpu import sysfs_write
from gpuop_common.gpu.amd_partition import (
    COMPUTE_ATTR,
    MEMORY_ATTR,
    PartitionPlanError,
    PartitionWrite,
    pair_refusal,
    partition_count,
    plan_writes,
)

MI300X = (("SPX", "DPX", "QPX", "CPX"), ("NPS1", "NPS4"))


@pytest.mark.parametrize(
    ("compute", "memory", "xcc", "accepted"),
    [
        ("SPX", "NPS1", 8, True),
        ("SPX", "NPS4", 8, False),
        ("DPX", "NPS2", 8, True),
        ("DPX", "NPS4", 8, False),
        ("DPX", "NPS1", 6, False),  # MI300A: 6 XCCs
        ("TPX", "NPS1", 6, True),
        ("QPX", "NPS4", 8, True),
        ("QPX", "NPS1", 4, False),  # MI308X: one XCC per partition is CPX, not QPX
        ("CPX", "NPS4", 8, True),
        ("CPX", "NPS4", 6, False),
        ("CPX", "NPS1", 1, False),
    ],
)
def test_pair_rules(compute, memory, xcc, accepted):
    assert (pair_refusal(compute, memory, xcc) is None) is accepted


def test_unknown_mode_names_are_errors_naming_the_known_ones():
    with pytest.raises(PartitionPlanError, match=r"unknown compute partition 'XPX'.*SPX, DPX"):
        pair_refusal("XPX", "NPS1", 8)
    with pytest.raises(PartitionPlanError, match="unknown memory partition 'NPS5'"):
        pair_refusal("SPX", "NPS5", 8)


def test_partition_counts():
    assert [partition_count(m, 8) for m in ("SPX", "DPX", "TPX", "QPX", "CPX")] == [1, 2, 3, 4, 8]


def test_spx_nps1_to_cpx_nps4_and_back_orders_the_writes():
    forward = plan_writes(("SPX", "NPS1"), ("CPX", "NPS4"), MI300X, 8)
    assert forward == [PartitionWrite(COMPUTE_ATTR, "CPX"), PartitionWrite(MEMORY_ATTR, "NPS4")]
    back = plan_writes(("CPX", "NPS4"), ("SPX", "NPS1"), MI300X, 8)
    assert back == [PartitionWrite(MEMORY_ATTR, "NPS1"), PartitionWrite(COMPUTE_ATTR, "SPX")]


def test_no_writes_when_already_there_and_single_changes():
    assert plan_writes(("CPX", "NPS4"), ("CPX", "NPS4"), MI300X, 8) == []
    assert plan_writes(("CPX", "NPS4"), ("QPX", None), MI300X, 8) == [PartitionWrite(COMPUTE_ATTR, "QPX")]
    assert plan_writes(("CPX", "NPS4"), (None, "NPS1"), MI300X, 8) == [PartitionWrite(MEMORY_ATTR, "NPS1")]


def test_goes_through_a_middle_mode_when_both_direct_orders_are_refused():
    avail = (("SPX", "DPX", "QPX", "CPX"), ("NPS1", "NPS2", "NPS4"))
    plan = plan_writes(("DPX", "NPS2"), ("QPX", "NPS4"), avail, 8)
    assert plan == [
        PartitionWrite(COMPUTE_ATTR, "CPX"),
        PartitionWrite(MEMORY_ATTR, "NPS4"),
        PartitionWrite(COMPUTE_ATTR, "QPX"),
    ]


def test_refused_and_unavailable_targets_name_the_reason():
    with pytest.raises(PartitionPlanError, match="SPX is refused with memory partition NPS4"):
        plan_writes(("CPX", "NPS4"), ("SPX", None), MI300X, 8)
    with pytest.raises(PartitionPlanError, match=r"TPX is not available \(available: SPX, DPX, QPX, CPX\)"):
        plan_writes(("SPX", "NPS1"), ("TPX", None), MI300X, 8)
    with pytest.raises(PartitionPlanError, match="memory partition NPS8 is not available"):
        plan_writes(("SPX", "NPS1"), (None, "NPS8"), MI300X, 8)


def test_write_attr_writes_one_line_and_never_creates(tmp_path):
    attr = tmp_path / "current_compute_partition"
    attr.write_text("SPX\n")
    sysfs_write.write_attr(attr, "CPX")
    assert attr.read_text() == "CPX\n"
    with pytest.raises(OSError) as excinfo:
        sysfs_write.write_attr(tmp_path / "absent", "CPX")
    assert excinfo.value.errno == errno.ENOENT
    assert not (tmp_path / "absent").exists()


def test_writer_from_env(monkeypatch):
    monkeypatch.delenv(sysfs_write.WRITER_ENV, raising=False)
    assert sysfs_write.writer_from_env() is sysfs_write.write_attr
    monkeypatch.setenv(sysfs_write.WRITER_ENV, "gpuop_common.gpu.sysfs_write:write_attr")
    assert sysfs_write.writer_from_env() is sysfs_write.write_attr
    for bad in ("no_colon", "gpuop_common.gpu.sysfs_write:nothing_here"):
        monkeypatch.setenv(sysfs_write.WRITER_ENV, bad)
        with pytest.raises(ValueError, match="GPUOP_SYSFS_WRITER"):
            sysfs_write.writer_from_env()
