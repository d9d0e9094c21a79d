"""`stub` pods: Running and Ready at once, nothing executed. Cheap enough for 1,000 nodes.

One shared pod watch feeds a set of pod keys that need a status write or a final delete; a small pool
of threads drains it, so a DaemonSet rolling onto every node costs one PATCH per pod and no threads
per node. Pods owned by a Job run to completion (Succeeded) so Jobs finish.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

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
from gpuop_sim.workloads.simkubelet.status import ContainerState, pod_status
from gpuop_sim.workloads.simkubelet.worker import utc_now


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
    return pod_status("Succeeded" if finishes else "Running", containers, address, now, now)


def needs_stub_status(pod: Obj) -> bool:
    phase = pod_phase(pod)
    if controller_kind(pod) == "Job":
        return phase not in ("Succeeded", "Failed")
    return phase != "Running" or not status_of(pod).get("containerStatuses")


class StubRunner:
    """Writes stub statuses and completes deletions for pods bound to stub nodes."""

    def __init__(self, rest: KubeRest, addresses: dict[str, str], workers: int = 8) -> None:
        self.rest = rest
        self.addresses = addresses  # node name -> address
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stub-kubelet")
        self._inflight: set[str] = set()
        self._lock = threading.Lock()
        self._log = logging.getLogger(__name__)

    def on_pod(self, event: str, pod: Obj) -> None:
        node = spec_of(pod).get("nodeName")
        if event == "DELETED" or node not in self.addresses:
            return
        if is_deleting(pod):
            self._submit(pod, self._delete)
        elif needs_stub_status(pod):
            self._submit(pod, self._run)

    def stop(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, pod: Obj, action: Callable[[Obj], None]) -> None:
        key = key_of(pod) + ("/delete" if is_deleting(pod) else "")
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
            if not is_status(error, 404, 409, 422):
                self._log.warning("stub kubelet: pod %s: %s", key, error)
        finally:
            with self._lock:
                self._inflight.discard(key)

    def _run(self, pod: Obj) -> None:
        status = stub_status(pod, self.addresses[str(spec_of(pod).get("nodeName"))], utc_now())
        self.rest.replace_status(PODS, pod, status)

    def _delete(self, pod: Obj) -> None:
        self.rest.delete(
            PODS, name_of(pod), namespace_of(pod), grace_period_seconds=0, uid=meta(pod).get("uid")
        )
