"""The playbook Job's termination message stays valid JSON within the kubelet's 4096-byte limit."""

from datetime import UTC, datetime

from gpuop_operator.jobresult import TERMINATION_MESSAGE_LIMIT, PlaybookSummary, TaskFailure


def _summary(failures: int, facts: int = 0) -> PlaybookSummary:
    now = datetime.now(UTC)
    return PlaybookSummary(
        playbook="driver-install",
        status="failed",
        rc=2,
        failed_tasks=[TaskFailure(task=f"task {i}", message="m" * 300) for i in range(failures)],
        facts={f"fact{i}": "v" * 200 for i in range(facts)},
        started_at=now,
        finished_at=now,
    )


def test_small_summary_is_kept_whole() -> None:
    summary = _summary(2)
    assert PlaybookSummary.model_validate_json(summary.to_termination_message()) == summary


def test_many_failures_are_trimmed_from_the_end_and_stay_parseable() -> None:
    message = _summary(40).to_termination_message()
    assert len(message.encode()) <= TERMINATION_MESSAGE_LIMIT
    kept = PlaybookSummary.model_validate_json(message).failed_tasks
    assert 0 < len(kept) < 40 and kept[0].task == "task 0"


def test_oversized_facts_are_dropped_when_no_failures_remain() -> None:
    message = _summary(0, facts=40).to_termination_message()
    assert len(message.encode()) <= TERMINATION_MESSAGE_LIMIT
    assert PlaybookSummary.model_validate_json(message).facts == {}
