"""Tool output -> per-GPU verdicts: RVS result lines, AGFHC summary lines, DCGM JSON; garbage never passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpuop_test_runner.parsers import UnparsableOutputError, parse_agfhc, parse_dcgm, parse_rvs
from gpuop_test_runner.results import GpuTarget, attribute

TARGETS = [
    GpuTarget(id=f"gpu{i}", index=i, pci_address=f"0000:0{i}:00.0", kfd_gpu_ids=(40000 + i,))
    for i in range(3)
]


def rvs_output(failing: int | None = None) -> str:
    lines = ["[INFO  ] [  4.321] rvs 1.0: starting", "[RESULT] [597012.9] Action name :gst-1"]
    for i in range(3):
        verdict = "FALSE" if i == failing else "TRUE"
        lines.append(
            f"[RESULT] [597060.1] [gst-1] gst gpu_id: {40000 + i} GFLOPS 1234.5 Target: 1000 met: {verdict}"
        )
    lines.append("[RESULT] [597070.0] [gst-1] pass: TRUE")
    return "\n".join(lines) + "\n"


def by_index(results: list) -> dict[int, str]:  # type: ignore[type-arg]
    return {r.index: r.result for r in results}


def test_rvs_lines_map_kfd_gpu_ids_to_gpus() -> None:
    assert by_index(attribute(parse_rvs(rvs_output()), TARGETS)) == {0: "passed", 1: "passed", 2: "passed"}
    failed = attribute(parse_rvs(rvs_output(failing=1)), TARGETS)
    assert by_index(failed) == {0: "passed", 1: "failed", 2: "passed"}
    assert "gst-1 on GPU 40001" in failed[1].detail


def test_rvs_action_failure_without_gpu_fails_every_target() -> None:
    out = rvs_output().replace("[gst-1] pass: TRUE", "[gst-1] pass: FALSE")
    assert set(by_index(attribute(parse_rvs(out), TARGETS)).values()) == {"failed"}


@pytest.mark.parametrize("parser", [parse_rvs, parse_agfhc, parse_dcgm])
@pytest.mark.parametrize("garbage", ["", "Segmentation fault (core dumped)\n", "\x00\xff binary\n" * 50])
def test_garbage_is_unparsable_and_keeps_the_first_lines(parser, garbage: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnparsableOutputError) as caught:
        parser(garbage)
    assert caught.value.head == [line[:200] for line in garbage.splitlines()[:20]]


def test_agfhc_summary_lines() -> None:
    out = "AGFHC v1.2\nhbm_bw  GPU0  PASS\nhbm_bw  GPU1  FAIL\ngfx_dgemm GPU 0 PASSED\npcie_link all PASS\n"
    verdicts = parse_agfhc(out)
    assert verdicts.gpus == {"0": True, "1": False}
    assert verdicts.node is True
    assert by_index(attribute(verdicts, TARGETS)) == {0: "passed", 1: "failed", 2: "passed"}


def dcgm_json(failing: int | None = None, *, new_format: bool = True) -> str:
    def result(i: int) -> dict[str, object]:
        status = "Fail" if i == failing else "Pass"
        if new_format:
            return {"entity_group": "GPU", "entity_group_id": 1, "entity_id": i, "status": status}
        return {"gpu_id": str(i), "status": status}

    key = "DCGM Diagnostic" if new_format else "DCGM GPU Diagnostic"
    return json.dumps(
        {
            key: {
                "test_categories": [
                    {
                        "category": "Deployment",
                        "tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}],
                    },
                    {
                        "category": "Hardware",
                        "tests": [{"name": "memory", "results": [result(i) for i in range(3)]}],
                    },
                    {
                        "category": "Stress",
                        "tests": [{"name": "pcie", "results": [result(i) for i in range(3)]}],
                    },
                ]
            },
            "version": "4.2.0",
        }
    )


@pytest.mark.parametrize("new_format", [True, False])
def test_dcgm_json_per_test_and_gpu(new_format: bool) -> None:
    assert set(by_index(attribute(parse_dcgm(dcgm_json(new_format=new_format)), TARGETS)).values()) == {
        "passed"
    }
    failed = attribute(parse_dcgm(dcgm_json(failing=2, new_format=new_format)), TARGETS)
    assert by_index(failed) == {0: "passed", 1: "passed", 2: "failed"}
    assert failed[2].detail == "memory on GPU 2; pcie on GPU 2"


def test_dcgm_json_without_results_is_unparsable() -> None:
    with pytest.raises(UnparsableOutputError, match="no test results"):
        parse_dcgm(json.dumps({"DCGM Diagnostic": {"test_categories": []}}))
    with pytest.raises(UnparsableOutputError, match="not JSON"):
        parse_dcgm('{"DCGM Diagnostic": ')


def test_a_target_the_output_never_mentions_is_failed() -> None:
    verdicts = parse_dcgm(dcgm_json())
    extra = GpuTarget(id="gpu9", index=9, pci_address="0000:09:00.0")
    # DCGM's Denylist result names no GPU, so it judges the unmentioned GPU 9 (passed) ...
    assert attribute(verdicts, [extra])[0].result == "passed"
    # ... and with no GPU-less result at all, silence is not a pass.
    only_gpus = parse_rvs(rvs_output().replace("[RESULT] [597070.0] [gst-1] pass: TRUE", ""))
    assert attribute(only_gpus, [extra])[0].result == "failed"
    assert attribute(only_gpus, [extra])[0].detail == "not in the tool's output"


DOCUMENTED = Path(__file__).parent / "fixtures" / "documented"  # README.md there: which doc, which part


def test_rvs_output_in_the_documented_format_names_each_gpu_by_its_kfd_id() -> None:
    """The RVS user guide's GST lines: `[RESULT] [<ts>] <action> gst <gpu id> ... pass: TRUE|FALSE`,
    the action bracketed or not; the GPU is the number after the module name."""
    verdicts = parse_rvs((DOCUMENTED / "rvs-gst.txt").read_text())
    assert verdicts.gpus == {"33367": True, "3254": False, "50599": True}
    assert verdicts.node is None  # every result line named its GPU
    targets = [
        GpuTarget(id=f"gpu{i}", index=i, pci_address=f"0000:0{i}:00.0", kfd_gpu_ids=(kfd,))
        for i, kfd in enumerate((3254, 50599, 33367))
    ]
    assert by_index(attribute(verdicts, targets)) == {0: "failed", 1: "passed", 2: "passed"}


def test_dcgm_output_in_the_documented_format_fails_only_the_failing_gpu() -> None:
    """`dcgmi diag -j` as DCGM documents it: test_categories -> tests -> results with entity_group,
    entity_id and status; a CPU entity's result is no GPU's."""
    verdicts = parse_dcgm((DOCUMENTED / "dcgmi-diag-r1-j.json").read_text())
    assert verdicts.gpus == {"0": True, "1": False}
    assert verdicts.node is None
    assert verdicts.failures == ["memtest on GPU 1"]
