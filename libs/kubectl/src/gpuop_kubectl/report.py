"""The doctor's report as text: per node the verdict (the first broken link), its evidence and the
next step, then the other findings in one line each."""

from __future__ import annotations

from collections.abc import Sequence

from gpuop_kubectl.doctor import NodeReport
from gpuop_kubectl.snapshot import Snapshot


def render_report(report: NodeReport) -> str:
    verdict = report.verdict
    if report.ok:
        head = f"{report.node}: serving GPUs ({report.serving or 'no GPU resource in allocatable'})"
    else:
        head = f"{report.node}: NOT serving GPUs"
    lines = [head]
    if verdict is not None:
        lines.append(f"  {verdict.code.code} {verdict.code.title}: {verdict.summary}")
        lines += [f"    evidence: {line}" for line in verdict.evidence if line]
        if verdict.next_step:
            lines.append(f"    next: {verdict.next_step}")
    others = [x for x in report.findings if x is not verdict]
    lines += [f"  also {x.code.code} {x.code.title}: {x.summary}" for x in others]
    return "\n".join(lines)


def render_reports(reports: Sequence[NodeReport], snap: Snapshot) -> str:
    parts = [render_report(r) for r in reports] or ["no GPU node found"]
    if snap.unreadable:
        parts.append("could not read (the report may miss what is there):")
        parts += [f"  {line}" for line in dict.fromkeys(snap.unreadable)]
    return "\n".join(parts) + "\n"
