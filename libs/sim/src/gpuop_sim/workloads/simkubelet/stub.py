"""`stub` pods: Running and Ready at once, nothing executed. Cheap enough for 1,000 nodes.

One shared pod watch feeds a set of pod keys that need a status write or a final delete; a small pool
of threads drains it, so a DaemonSet rolling onto every node costs one PATCH per pod and no threads
per node. Pods owned by a Job run to completion (Succeeded) so Jobs finish.

A test hook gives stub pods a simulated outcome: `outcome(pod) -> StubOutcome | None`. With an
outcome the pod is Running for `duration_s`, then its containers terminate with `exit_code` and
`termination_message` (`state.terminated.message`); with restartPolicy Never (or OnFailure and exit
0) the pod ends Succeeded / Failed, otherwise the containers restart (restartCount + 1, `lastState`)
and the hook is asked again for the next run. None keeps the default behaviour above.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from gpuop_sim.workloads.kubeapi import PODS, KubeRest, is_status
from gpuop_sim.workloads.objects import (
    Obj,
    controller_kind,
    is_deleting,
    key_of,
    meta,
    name_of,
    namespace_of,
    pod_phase,
    spec_of,
    status_of,
)
from gpuop_sim.workloads.simkubelet.status import ContainerState, pod_status, qos_class_of
from gpuop_sim.workloads.simkubelet.worker import restart_backoff, status_error_message, utc_now


@dataclass(frozen=True)
class StubOutcome:
    """What a stub pod's run does: runs `duration_s`, then exits with this code and message."""

    duration_s: float = 0.0
    exit_code: int = 0
    termination_message: str = ""


StubOutcomeFn = Callable[[Obj], "StubOutcome | None"]


@dataclass
class _StubRun:
    """One stub pod with a simulated outcome, between its Running write and its termination."""

    pod: Obj
    node: str
    outcome: StubOutcome
    started_at: str
    restart_count: int = 0
    last_termination: Obj = field(default_factory=dict)
    generation: int = 0  # a reboot starts a new run; a timer of an older one does nothing


def _states(
    pod: Obj, run: _StubRun, state: str, now: str, *, reason: str = "", code: int = 0, message: str = ""
) -> list[ContainerState]:
    containers = []
    for spec in spec_of(pod).get("containers") or []:
        item = ContainerState(str(spec.get("name")), str(spec.get("image")))
        item.state, item.restart_count, item.started_at = state, run.restart_count, run.started_at
        item.container_id = f"sim://stub/{meta(pod).get('uid', '')}/{item.name}/{run.restart_count}"
        item.last_termination = dict(run.last_termination)
        if state == "running":
            item.ready = item.started = True
        else:
            item.reason, item.exit_code, item.message, item.finished_at = reason, code, message, now
        containers.append(item)
    return containers


def _restarts(pod: Obj, exit_code: int) -> bool:
    policy = str(spec_of(pod).get("restartPolicy") or "Always")
    return policy == "Always" or (policy == "OnFailure" and exit_code != 0)


def stub_status(pod: Obj, address: str, now: str) -> Obj:
    """The status a stub kubelet reports: Running+Ready, or Succeeded for Job pods."""
    finishes = controller_kind(pod) == "Job"
    containers = []
    for spec in spec_of(pod).get("containers") or []:
        state = ContainerState(str(spec.get("name")), str(spec.get("image")))
        if finishes:
            state.state, state.reason, state.exit_code = "terminated", "Completed", 0
            state.finished_at = now
        else:
            state.state, state.ready, state.started = "running", True, True
        state.started_at = now
        state.container_id = f"sim://stub/{meta(pod).get('uid', '')}/{state.name}"
        containers.append(state)
    phase = "Succeeded" if finishes else "Running"
    return pod_status(phase, containers, address, now, now, qos_class=qos_class_of(pod))


def needs_stub_status(pod: Obj) -> bool:
    phase = pod_phase(pod)
    if phase in ("Succeeded", "Failed"):
        return False
    if controller_kind(pod) == "Job":
        return phase not in ("Succeeded", "Failed")
    return phase != "Running" or not status_of(pod).get("containerStatuses")


class StubRunner:
    """Writes stub statuses and completes deletions for pods bound to stub nodes."""

    def __init__(
        self,
        rest: KubeRest,
        addresses: dict[str, str],
        workers: int = 8,
        outcome: StubOutcomeFn | None = None,
    ) -> None:
        self.rest = rest
        self.addresses = addresses  # node name -> address
        self.outcome = outcome  # the test hook; may be replaced while running
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stub-kubelet")
        self._inflight: set[str] = set()
        self._lock = threading.Lock()
        self._log = logging.getLogger(__name__)
        self._runs: dict[str, _StubRun] = {}  # pod uid -> run with a simulated outcome
        self._done: set[str] = set()  # pod uids whose outcome run has ended
        # (due, seq, uid, generation, start?) heap: a run's end, or a restart after its back-off
        self._timers: list[tuple[float, int, str, int, bool]] = []
        self._seq = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._stopped = False
        self._timer_thread = threading.Thread(target=self._timer_loop, name="stub-outcomes", daemon=True)
        self._timer_thread.start()

    def on_pod(self, event: str, pod: Obj) -> None:
        node = spec_of(pod).get("nodeName")
        uid = str(meta(pod).get("uid", ""))
        if event == "DELETED":
            with self._lock:
                self._runs.pop(uid, None)
                self._done.discard(uid)
            return
        if node not in self.addresses:
            return
        if is_deleting(pod):
            with self._lock:
                self._runs.pop(uid, None)
            self._submit(pod, self._delete)
            return
        with self._lock:
            run = self._runs.get(uid)
            if run is not None:
                run.pod = pod
                return
            if uid in self._done:  # its outcome ran; the terminal status write may not be seen yet
                return
        if needs_stub_status(pod):
            self._submit(pod, self._run)

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            self._wake.notify_all()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def reboot(self, node: str, pods: list[Obj]) -> None:
        """A reboot of `node` (its bound `pods`): each running container dies (reason Unknown, exit
        255, as a kubelet reports a container it finds gone after a reboot); containers of pods that
        restart start again with restartCount + 1, a running pod with restartPolicy Never fails."""
        now = utc_now()
        with self._lock:
            runs = [(uid, run) for uid, run in self._runs.items() if run.node == node]
            tracked = {uid for uid, _ in runs}
        for pod in pods:
            if spec_of(pod).get("nodeName") != node or is_deleting(pod) or pod_phase(pod) != "Running":
                continue
            if str(meta(pod).get("uid", "")) not in tracked:
                self._submit(pod, functools.partial(self._reboot_plain, now=now), "/reboot")
        for uid, run in runs:
            self._submit(
                run.pod,
                functools.partial(self._end_run, uid, run.generation, now, True),
                f"/reboot/{run.generation}",
            )

    def _end_run(self, uid: str, generation: int, now: str, rebooted: bool, _pod: Obj) -> None:
        self._terminate(uid, generation, now or utc_now(), rebooted=rebooted)

    def _reboot_plain(self, pod: Obj, now: str) -> None:
        """A default stub pod after a reboot: restarted containers, or Failed for restartPolicy Never."""
        address = self.addresses[str(spec_of(pod).get("nodeName"))]
        old = {c.get("name"): c for c in status_of(pod).get("containerStatuses") or []}
        never = str(spec_of(pod).get("restartPolicy") or "Always") == "Never"
        containers = []
        for spec in spec_of(pod).get("containers") or []:
            item = ContainerState(str(spec.get("name")), str(spec.get("image")))
            before = old.get(item.name) or {}
            started = str(((before.get("state") or {}).get("running") or {}).get("startedAt") or now)
            item.restart_count = int(before.get("restartCount") or 0)
            if never:
                item.state, item.reason, item.exit_code = "terminated", "Unknown", 255
                item.started_at, item.finished_at = started, now
            else:
                item.last_termination = {
                    "exitCode": 255,
                    "reason": "Unknown",
                    "startedAt": started,
                    "finishedAt": now,
                    "containerID": before.get("containerID", ""),
                }
                item.restart_count += 1
                item.state, item.ready, item.started, item.started_at = "running", True, True, now
            item.container_id = f"sim://stub/{meta(pod).get('uid', '')}/{item.name}/{item.restart_count}"
            containers.append(item)
        start = str(status_of(pod).get("startTime") or now)
        self.rest.replace_status(
            PODS,
            pod,
            pod_status(
                "Failed" if never else "Running", containers, address, start, now, qos_class=qos_class_of(pod)
            ),
        )

    def _timer_loop(self) -> None:
        with self._lock:
            while not self._stopped:
                if not self._timers:
                    self._wake.wait()
                    continue
                due, _, uid, generation, start = self._timers[0]
                left = due - time.monotonic()
                if left > 0:
                    self._wake.wait(left)
                    continue
                heapq.heappop(self._timers)
                run = self._runs.get(uid)
                if run is None or run.generation != generation:
                    continue
                self._lock.release()
                try:
                    action = (
                        functools.partial(self._restart_run, uid, generation)
                        if start
                        else functools.partial(self._end_run, uid, generation, "", False)
                    )
                    self._submit(run.pod, action, f"/{'start' if start else 'outcome'}/{generation}")
                finally:
                    self._lock.acquire()

    def _schedule(self, uid: str, run: _StubRun, delay: float, *, start: bool = False) -> None:
        with self._lock:
            due = time.monotonic() + max(delay, 0.0)
            heapq.heappush(self._timers, (due, next(self._seq), uid, run.generation, start))
            self._wake.notify()

    def _restart_run(self, uid: str, generation: int, _pod: Obj) -> None:
        """The back-off is over: the containers start again, with the hook asked for this run."""
        with self._lock:
            run = self._runs.get(uid)
            if run is None or run.generation != generation:
                return
        hook = self.outcome
        outcome = (hook(run.pod) if hook else None) or run.outcome
        self._start_run(run.pod, outcome, run)

    def _start_run(self, pod: Obj, outcome: StubOutcome, previous: _StubRun | None = None) -> None:
        uid = str(meta(pod).get("uid", ""))
        node = str(spec_of(pod).get("nodeName"))
        run = _StubRun(pod, node, outcome, utc_now())
        if previous is not None:
            run.restart_count, run.last_termination = previous.restart_count, previous.last_termination
            run.generation = previous.generation + 1
        with self._lock:
            self._runs[uid] = run
        status = pod_status(
            "Running",
            _states(pod, run, "running", run.started_at),
            self.addresses[node],
            run.started_at,
            utc_now(),
            qos_class=qos_class_of(pod),
        )
        self.rest.replace_status(PODS, pod, status)
        self._schedule(uid, run, run.outcome.duration_s)

    def _terminate(self, uid: str, generation: int, now: str, *, rebooted: bool = False) -> None:
        with self._lock:
            run = self._runs.get(uid)
            if run is None or run.generation != generation:
                return
        pod = run.pod
        if rebooted:
            code, reason, message = 255, "Unknown", ""
        else:
            code = run.outcome.exit_code
            reason, message = ("Completed" if code == 0 else "Error"), run.outcome.termination_message
        address = self.addresses[run.node]
        if _restarts(pod, code) or (
            rebooted and str(spec_of(pod).get("restartPolicy") or "Always") != "Never"
        ):
            run.restart_count += 1
            run.last_termination = {
                "exitCode": code,
                "reason": reason,
                "message": message,
                "startedAt": run.started_at,
                "finishedAt": now,
                "containerID": f"sim://stub/{uid}",
            }
            if rebooted:  # the node comes up: containers start again, no back-off
                self._restart_run(uid, generation, pod)
                return
            # CrashLoopBackOff until the restart, as the kubelet reports it.
            run.generation += 1
            backoff = restart_backoff(run.restart_count - 1)
            message = f"back-off {backoff:.1f}s restarting failed container"
            states = _states(pod, run, "waiting", now, reason="CrashLoopBackOff", message=message)
            status = pod_status("Running", states, address, run.started_at, now, qos_class=qos_class_of(pod))
            self.rest.replace_status(PODS, pod, status)
            self._schedule(uid, run, backoff, start=True)
            return
        with self._lock:
            self._runs.pop(uid, None)
            self._done.add(uid)
        phase = "Succeeded" if code == 0 else "Failed"
        states = _states(pod, run, "terminated", now, reason=reason, code=code, message=message)
        status = pod_status(phase, states, address, run.started_at, now, qos_class=qos_class_of(pod))
        self.rest.replace_status(PODS, pod, status)

    def _submit(self, pod: Obj, action: Callable[[Obj], None], tag: str = "") -> None:
        key = key_of(pod) + ("/delete" if is_deleting(pod) else "") + tag
        with self._lock:
            if key in self._inflight:
                return
            self._inflight.add(key)
        try:
            self._pool.submit(self._guarded, key, pod, action)
        except RuntimeError:  # pool shut down
            with self._lock:
                self._inflight.discard(key)

    def _guarded(self, key: str, pod: Obj, action: Callable[[Obj], None]) -> None:
        try:
            action(pod)
        except Exception as error:
            if is_status(error, 422):
                # A replaced pod (its uid test failed) or a status the server refused: never silent.
                self._log.warning("stub kubelet: pod %s: write refused: %s", key, status_error_message(error))
            elif not is_status(error, 404, 409):
                self._log.warning("stub kubelet: pod %s: %s", key, error)
        finally:
            with self._lock:
                self._inflight.discard(key)

    def _run(self, pod: Obj) -> None:
        hook = self.outcome
        outcome = hook(pod) if hook is not None else None
        if outcome is not None:
            self._start_run(pod, outcome)
            return
        status = stub_status(pod, self.addresses[str(spec_of(pod).get("nodeName"))], utc_now())
        self.rest.replace_status(PODS, pod, status)

    def _delete(self, pod: Obj) -> None:
        self.rest.delete(
            PODS, name_of(pod), namespace_of(pod), grace_period_seconds=0, uid=meta(pod).get("uid")
        )
