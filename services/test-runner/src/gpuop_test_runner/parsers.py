"""Tool output -> verdicts per GPU, as the tool itself names the GPU (index, KFD gpu_id, ...).

Each parser returns `Verdicts`: `gpus` maps the tool's GPU key to passed/failed (a GPU failing any
test or action is failed), `node` is the verdict of results that name no GPU (None: there were
none). Output with no verdict at all raises `UnparsableOutputError`: a run is never a pass because
we could not read what the tool said.

- RVS: result lines as the RVS user guide documents them (docs/test-runner.md says where):
  `[RESULT] [<timestamp>] [<action>] <module> <gpu id> ... pass: TRUE|FALSE`, the action name bracketed
  or not (the guide's own GST example prints it bare), `met:` in some modules; the number after the
  module name, or a `gpu_id: <n>` in the line, names the GPU (RVS reports the KFD gpu_id).
- AGFHC (not public; the line shape of its per-test summary): `<test> ... GPU<n> ... PASS|FAIL`, or
  `all` instead of `GPU<n>` for a result about the whole node.
- DCGM (`dcgmi diag -j`): `{"DCGM GPU Diagnostic"|"DCGM Diagnostic": {"test_categories": [{"tests":
  [{"name", "results": [{"status": "Pass|Fail|Warn|Skip", "gpu_id"|"gpu_ids"|"entity_id"}]}]}]}}`;
  `Fail` fails, the other statuses do not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

KEEP_LINES = 20  # first lines of unparsable output kept in the result


class UnparsableOutputError(ValueError):
    """No verdict could be read; `head` holds the first lines of the output."""

    def __init__(self, reason: str, output: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.head = first_lines(output)


def first_lines(output: str, count: int = KEEP_LINES) -> list[str]:
    return [line[:200] for line in output.splitlines()[:count]]


@dataclass
class Verdicts:
    gpus: dict[str, bool] = field(default_factory=dict)
    node: bool | None = None
    failures: list[str] = field(default_factory=list)  # "<test> on GPU <key>" of each failure

    def add(self, gpu: str | None, passed: bool, test: str) -> None:
        if gpu is None:
            self.node = passed if self.node is None else (self.node and passed)
        else:
            self.gpus[gpu] = self.gpus.get(gpu, True) and passed
        if not passed:
            self.failures.append(f"{test} on GPU {gpu}" if gpu is not None else test)

    @property
    def empty(self) -> bool:
        return not self.gpus and self.node is None


_RVS_RESULT = re.compile(
    r"\[RESULT\]\s*\[[^\]]*\]\s*(?:\[(?P<bracketed>[^\]]+)\]|(?P<bare>[^\s\[]+))"
    r"(?P<body>.*?)\b(?:pass|met):\s*(?P<verdict>TRUE|FALSE)\b",
    re.IGNORECASE,
)
_RVS_GPU = re.compile(r"\b(?:gpu_id|gpu)\s*[:=]?\s*(?P<gpu>\d+)\b", re.IGNORECASE)
# The documented shape: `<module> <gpu id> ...` right after the action (`gst 33367 Gflop: ...`).
_RVS_MODULE_GPU = re.compile(r"^\s*[A-Za-z][\w-]*\s+(?P<gpu>\d+)\b")


def parse_rvs(output: str) -> Verdicts:
    verdicts = Verdicts()
    for line in output.splitlines():
        match = _RVS_RESULT.search(line)
        if match is None:
            continue
        body = match.group("body")
        gpu = _RVS_GPU.search(body) or _RVS_MODULE_GPU.match(body)
        action = match["bracketed"] or match["bare"]
        verdicts.add(gpu.group("gpu") if gpu else None, match.group("verdict").upper() == "TRUE", action)
    if verdicts.empty:
        raise UnparsableOutputError("no RVS [RESULT] line with pass: or met:", output)
    return verdicts


_AGFHC_RESULT = re.compile(
    r"^\s*(?P<test>[A-Za-z0-9_.:-]+)\s.*?(?:\bGPU\s*[:#]?\s*(?P<gpu>\d+)|\b(?P<all>all))\b"
    r".*?\b(?P<verdict>PASS(?:ED)?|FAIL(?:ED)?)\s*$",
    re.IGNORECASE,
)


def parse_agfhc(output: str) -> Verdicts:
    verdicts = Verdicts()
    for line in output.splitlines():
        match = _AGFHC_RESULT.match(line)
        if match is None:
            continue
        verdicts.add(match["gpu"], match["verdict"].upper().startswith("PASS"), match["test"])
    if verdicts.empty:
        raise UnparsableOutputError("no AGFHC result line (<test> ... GPU<n> ... PASS|FAIL)", output)
    return verdicts


def _dcgm_gpus(result: dict[str, Any]) -> list[str | None]:
    if result.get("entity_group", "GPU") != "GPU":
        return []  # a switch or CPU entity: not one of our GPUs
    for key in ("gpu_id", "entity_id"):
        if key in result:
            return [str(result[key])]
    if "gpu_ids" in result:
        return [part.strip() for part in str(result["gpu_ids"]).split(",") if part.strip()]
    return [None]


def _dcgm_tests(data: Any) -> Iterable[dict[str, Any]]:
    if not isinstance(data, dict):
        return []
    body = data.get("DCGM GPU Diagnostic", data.get("DCGM Diagnostic"))
    if not isinstance(body, dict) or not isinstance(body.get("test_categories"), list):
        return []
    return [
        test
        for category in body["test_categories"]
        if isinstance(category, dict) and isinstance(category.get("tests"), list)
        for test in category["tests"]
        if isinstance(test, dict)
    ]


def parse_dcgm(output: str) -> Verdicts:
    start = output.find("{")
    try:
        data = json.loads(output[start:]) if start >= 0 else None
    except json.JSONDecodeError as exc:
        raise UnparsableOutputError(
            f"dcgmi output is not JSON: {exc.msg} at line {exc.lineno}", output
        ) from exc
    verdicts = Verdicts()
    for test in _dcgm_tests(data):
        for result in test.get("results", []) if isinstance(test.get("results"), list) else []:
            if not isinstance(result, dict) or not isinstance(result.get("status"), str):
                continue
            passed = result["status"].lower() != "fail"
            for gpu in _dcgm_gpus(result):
                verdicts.add(gpu, passed, str(test.get("name", "?")))
    if verdicts.empty:
        raise UnparsableOutputError(
            "dcgmi JSON has no test results (test_categories[].tests[].results)", output
        )
    return verdicts


PARSERS: dict[str, Callable[[str], Verdicts]] = {"RVS": parse_rvs, "AGFHC": parse_agfhc, "DCGM": parse_dcgm}
