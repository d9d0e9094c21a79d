"""Conformance: replay every golden kube-apiserver 1.36 case against a fresh simulator.

The cases and the reference replayer (`replay.py`, imported by path, not copied) live in the
shared fixtures. Each file runs against its own fresh server with controllers off (a bare
kube-apiserver). A case that cannot match is listed in KNOWN_DIFFERENCES with its reason.
"""

from __future__ import annotations

import importlib.util
import json
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import pytest
from gpuop_sim.apiserver import SimApiServer

from tools.shared_fixtures import shared_dir

# The shared/ folder sits beside the checkout (and beside CI's clone): a missing one is a
# setup error to fix, not a reason to skip.
GOLDEN = shared_dir() / "fixtures" / "kube-apiserver-1.36"
# Every transcript file is replayed; a new file in the fixtures is picked up without a code change.
FILES = tuple(sorted(path.stem for path in GOLDEN.glob("*.jsonl")))

# Cases the simulator does not answer like the real server yet, each with the issue that owns it.
# They are still replayed: each must still FAIL (strict), so one that starts passing is removed here.
NOT_YET: dict[str, str] = {}

# Cases whose recorded answer carries an artefact of the recording environment. Each is still
# replayed: the listed adjustment is applied to the recorded side first, so everything else is
# compared exactly.
FORK_ARTEFACT = "openshift-service-ca.crt"
KNOWN_DIFFERENCES = {
    "misc:pod-create": "recording server was an OpenShift build that adds a 4th projected source "
    f"({FORK_ARTEFACT}) to kube-api-access; upstream kube-apiserver (and the simulator) adds three",
}


# Files whose cases wait on the server's clock: a watch stream's end, the recorder's pauses while
# the server garbage-collects or sets CRD conditions (see _replay_file_at_once).
WAIT_ON_THE_SERVERS_CLOCK = frozenset({"watch", "finalizers", "discovery", "misc"})


def _load_replayer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("golden_replay", GOLDEN / "replay.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cases(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (GOLDEN / f"{name}.jsonl").read_text().splitlines() if line.strip()]


def _replayable(case: dict[str, Any], *, with_requires: bool = False) -> bool:
    needs_flags = bool(case.get("requires")) and not with_requires
    return not (case.get("skip_replay") or needs_flags or "kubectl" in case or "python_client" in case)


def _without_fork_source(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _without_fork_source(v) for k, v in x.items()}
    if isinstance(x, list):
        return [
            _without_fork_source(v)
            for v in x
            if not (isinstance(v, dict) and (v.get("configMap") or {}).get("name") == FORK_ARTEFACT)
        ]
    return x


def _install_crd(url: str) -> None:
    crd = json.loads((GOLDEN / "crd-deviceconfig.json").read_text())
    req = urllib.request.Request(
        url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        data=json.dumps(crd).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    urllib.request.urlopen(req, timeout=10).read()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with urllib.request.urlopen(
            url + "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/deviceconfigs.gpuop.dev"
        ) as r:
            conditions = json.loads(r.read())["status"].get("conditions") or []
        if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
            return
        time.sleep(0.05)
    raise AssertionError("DeviceConfig CRD never became Established")


@pytest.fixture(scope="module")
def replayer() -> ModuleType:
    return _load_replayer()


def _bare_server() -> SimApiServer:
    """A fresh server with controllers off (a bare kube-apiserver) and the prerequisite CRD."""
    server = SimApiServer(controllers=False, bookmark_interval=2.0).start()
    try:
        _install_crd(server.url)
    except BaseException:
        server.stop()
        raise
    return server


def test_golden_case_counts_match_the_readme() -> None:
    """The fixtures README: 242 cases in 10 files, 221 of them replay as raw HTTP."""
    assert len(FILES) == 10
    cases = [c for name in FILES for c in _cases(name)]
    assert len(cases) == 242
    assert sum(_replayable(c) for c in cases) == 221


def test_not_yet_names_real_cases() -> None:
    known = {f"{name}:{c['case']}" for name in FILES for c in _cases(name) if _replayable(c)}
    assert set(NOT_YET) <= known


def _replay_case(replayer: ModuleType, server: SimApiServer, case: dict[str, Any], case_id: str) -> list[Any]:
    expected = _without_fork_source(case) if case_id in KNOWN_DIFFERENCES else case
    diffs: list[Any] = replayer.replay_case(replayer.Client(server.url), expected)
    return diffs


def _replay_on_own_server(replayer: ModuleType, case: dict[str, Any], case_id: str) -> list[Any]:
    with _bare_server() as server:
        return _replay_case(replayer, server, case, case_id)


def _check(name: str, replayed: set[str], failures: dict[str, list[Any]]) -> None:
    assert replayed, f"{name}: no case replayed"
    passing_now = (set(NOT_YET) & replayed) - set(failures)
    assert not passing_now, f"these cases pass now: remove them from NOT_YET: {sorted(passing_now)}"
    assert {k: v for k, v in failures.items() if k not in NOT_YET} == {}


def _replay_file(
    replayer: ModuleType, server: SimApiServer, name: str, *, only_requires: bool = False
) -> None:
    failures: dict[str, list[Any]] = {}
    replayed: set[str] = set()
    for case in _cases(name):
        if not _replayable(case, with_requires=only_requires) or (only_requires and not case.get("requires")):
            continue
        case_id = f"{name}:{case['case']}"
        replayed.add(case_id)
        if diffs := _replay_case(replayer, server, case, case_id):
            failures[case_id] = diffs
    _check(name, replayed, failures)


def _replay_file_at_once(replayer: ModuleType, name: str) -> None:
    """Every case on its own fresh server, all at the same time.

    A watch case reads its stream until the server ends it at the request's `timeoutSeconds`
    (2-10 s, 42 s for the watch file one after another), as a real server does; other cases sleep
    the recorder's `pause_before_s` (GC, CRD conditions). The README lets a file's
    cases run in any order on one fresh server; a fresh server per case isolates them further (no
    other case's writes move the resourceVersion a bookmark carries), so running them side by side
    changes no answer, only the wall time."""
    cases = {f"{name}:{case['case']}": case for case in _cases(name) if _replayable(case)}
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        futures = {
            cid: pool.submit(_replay_on_own_server, replayer, case, cid) for cid, case in cases.items()
        }
        failures = {cid: diffs for cid, future in futures.items() if (diffs := future.result())}
    _check(name, set(cases), failures)


@pytest.mark.slow
@pytest.mark.parametrize("name", FILES)
def test_replay_golden_file(name: str, replayer: ModuleType) -> None:
    if name in WAIT_ON_THE_SERVERS_CLOCK:
        _replay_file_at_once(replayer, name)
        return
    with _bare_server() as server:
        _replay_file(replayer, server, name)


class _QuickClock:
    """The replayer waits 20-26 s for a 10 s etcd compaction; our compactor runs every 0.3 s."""

    def __init__(self) -> None:
        self.time = time.time

    @staticmethod
    def sleep(seconds: float) -> None:
        time.sleep(min(seconds, 1.0))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["crud", "watch"])
def test_replay_compaction_cases(name: str) -> None:
    """The `requires: --etcd-compaction-interval` cases, on a server compacting periodically."""
    replayer = _load_replayer()
    replayer.time = _QuickClock()  # type: ignore[attr-defined]
    with SimApiServer(controllers=False, compaction_interval=0.3) as server:
        _install_crd(server.url)
        _replay_file(replayer, server, name, only_requires=True)
