"""SimKubelets: the kubelets of every simulated node, behind one pod watch.

`process` nodes run each bound pod through a PodWorker (real local processes), `container` nodes
the same PodWorker with runc running each container from its image; `stub` nodes only write
Running/Ready statuses. Either way each node reports Ready, loses its not-ready taint, and, when given
a device source (the node's kubelet emulator), publishes the extended resources its device plugins
register.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, Protocol

from gpuop_sim.workloads.informer import Informer, WorkQueue
from gpuop_sim.workloads.kubeapi import CONFIGMAPS, PODS, SECRETS, KubeRest, is_status
from gpuop_sim.workloads.objects import (
    Obj,
    is_deleting,
    key_of,
    meta,
    name_of,
    namespace_of,
    pod_is_terminal,
    spec_of,
)
from gpuop_sim.workloads.simkubelet.devices import DeviceAllocator
from gpuop_sim.workloads.simkubelet.heartbeat import NodeHeartbeats
from gpuop_sim.workloads.simkubelet.nodestatus import (
    mark_not_ready,
    mark_ready,
    publish_resources,
    set_boot_id,
)
from gpuop_sim.workloads.simkubelet.stub import StubOutcomeFn, StubRunner
from gpuop_sim.workloads.simkubelet.worker import NodeRuntime, PodWorker, utc_now

log = logging.getLogger(__name__)

PodsMode = Literal["process", "container", "stub"]
PODS_MODES: tuple[PodsMode, ...] = ("process", "container", "stub")


class DeviceSource(DeviceAllocator, Protocol):
    """What a node's kubelet emulator offers: resources for the Node status, allocation for pods."""

    def capacity(self) -> Mapping[str, int]: ...
    def allocatable(self) -> Mapping[str, int]: ...
    def stop(self) -> None: ...


DeviceSourceFactory = Callable[[NodeRuntime, Callable[[], None]], DeviceSource]


class SimKubelets:
    def __init__(
        self,
        rest: KubeRest,
        nodes: list[NodeRuntime],
        mode: PodsMode,
        *,
        device_sources: DeviceSourceFactory | None = None,
        stub_outcome: StubOutcomeFn | None = None,
    ) -> None:
        self.rest = rest
        self.mode = mode
        self.nodes = {n.name: n for n in nodes}
        self._device_factory = device_sources
        self.device_sources: dict[str, DeviceSource] = {}
        self.pods = Informer(rest, PODS)
        self._objects: dict[str, Informer] = {}
        if mode != "stub":
            self._objects = {"configmaps": Informer(rest, CONFIGMAPS), "secrets": Informer(rest, SECRETS)}
        self._workers: dict[str, PodWorker] = {}
        self._node_up = {n.name: threading.Event() for n in nodes}
        for event in self._node_up.values():
            event.set()
        self._lock = threading.Lock()
        self._stub = (
            StubRunner(rest, {n.name: n.address for n in nodes}, outcome=stub_outcome)
            if mode == "stub"
            else None
        )
        self._resources = WorkQueue("node-resources", self._publish)
        self.heartbeats = NodeHeartbeats(rest, self.nodes, lambda name: self._node_up[name].is_set())

    def start(self, timeout: float = 30.0) -> None:
        for informer in self._objects.values():
            informer.start()
        for plural, informer in self._objects.items():
            if not informer.wait_synced(timeout):
                raise TimeoutError(f"kubelet cache for {plural} did not sync within {timeout}s")
        self._resources.start()
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="node-ready") as pool:
            list(pool.map(lambda n: mark_ready(self.rest, n.name, n.address, utc_now()), self.nodes.values()))
        self.heartbeats.start()
        if self._device_factory is not None:
            for node in self.nodes.values():
                self.device_sources[node.name] = self._device_factory(
                    node, self._resource_notifier(node.name)
                )
                self._resources.add(node.name)
        self.pods.add_handler(self._stub.on_pod if self._stub else self._on_pod)
        self.pods.start()
        if not self.pods.wait_synced(timeout):
            raise TimeoutError(f"kubelet pod cache did not sync within {timeout}s")

    def stop(self) -> None:
        """Terminate every container process (pods stay as they are in the API) and all threads."""
        self.heartbeats.stop()
        self.pods.stop()
        with self._lock:
            workers = list(self._workers.values())
            self._workers.clear()
        for worker in workers:
            worker.stop(delete_pod=False)
        for worker in workers:
            worker.join(timeout=10)
        if self._stub is not None:
            self._stub.stop()
        for source in self.device_sources.values():
            source.stop()
        self._resources.stop()
        for informer in self._objects.values():
            informer.stop()

    def reboot_node(
        self,
        name: str,
        *,
        down_seconds: float = 1.0,
        while_down: Callable[[], None] | None = None,
        timeout: float = 30.0,
    ) -> str:
        """Reboot node `name` as its kubelet and the node lifecycle controller would show it: Ready
        False (KubeletNotReady) plus the not-ready taint; every running container dies (restarted
        after the boot per restartPolicy; a running Never pod fails); `while_down` runs (the host's
        boot); a new `status.nodeInfo.bootID`; after at least `down_seconds` down, Ready True again.
        Returns the new boot id."""
        node = self.nodes.get(name)
        if node is None:
            raise KeyError(f"no simulated node named {name!r}")
        went_down = time.monotonic()
        up = self._node_up[name]
        up.clear()
        try:
            mark_not_ready(self.rest, name, utc_now(), "node is rebooting")
            if self._stub is None:
                with self._lock:
                    workers = [w for w in self._workers.values() if w.runtime.name == name]
                acks = [w.request_reboot() for w in workers]
                deadline = time.monotonic() + timeout
                for ack in acks:
                    if not ack.wait(max(deadline - time.monotonic(), 0.0)):
                        log.warning("node %s: a pod did not stop for the reboot within %ss", name, timeout)
            if while_down is not None:
                while_down()
            boot_id = str(uuid.uuid4())
            set_boot_id(self.rest, name, boot_id)
            time.sleep(max(went_down + down_seconds - time.monotonic(), 0.0))
            if self._stub is not None:
                # Stub pods have no processes to lose while down; their kubelet reports what the
                # reboot did to them as it comes back.
                self._stub.reboot(name, [p for p in self.pods.items() if spec_of(p).get("nodeName") == name])
        finally:
            up.set()
        mark_ready(self.rest, name, node.address, utc_now())
        return boot_id

    def set_stub_outcome(self, outcome: StubOutcomeFn | None) -> None:
        """The stub pods' outcome hook for pods that start from now on (stub mode only)."""
        if self._stub is None:
            raise ValueError("stub outcomes need pods='stub'; process pods run their real programs")
        self._stub.outcome = outcome

    def _resource_notifier(self, node_name: str) -> Callable[[], None]:
        return lambda: self._resources.add(node_name)

    def worker_for(self, pod: Obj) -> PodWorker | None:
        with self._lock:
            return self._workers.get(str(meta(pod).get("uid", "")))

    def _lookup(self, plural: str) -> Mapping[str, Obj]:
        informer = self._objects.get(plural)
        return {key_of(o): o for o in informer.items()} if informer else {}

    def _publish(self, node_name: str) -> None:
        source = self.device_sources.get(node_name)
        if source is not None:
            publish_resources(self.rest, node_name, source.capacity(), source.allocatable())

    def _on_pod(self, event: str, pod: Obj) -> None:
        node = self.nodes.get(str(spec_of(pod).get("nodeName") or ""))
        if node is None:
            return
        uid = str(meta(pod).get("uid", ""))
        with self._lock:
            worker = self._workers.get(uid)
            if event == "DELETED":
                if worker is not None:
                    self._workers.pop(uid, None)
                    worker.stop(delete_pod=False)
                return
            if worker is not None:
                worker.update(pod)
                return
            if is_deleting(pod):
                # Never started here (or started by a previous simulator run): finish the delete.
                threading.Thread(target=self._force_delete, args=(pod,), daemon=True).start()
                return
            if pod_is_terminal(pod):
                return
            worker = PodWorker(
                node,
                pod,
                self.rest,
                self._lookup,
                self.device_sources.get(node.name),
                node_up=self._node_up[node.name],
            )
            self._workers[uid] = worker
        worker.start()

    def _force_delete(self, pod: Obj) -> None:
        try:
            self.rest.delete(
                PODS, name_of(pod), namespace_of(pod), grace_period_seconds=0, uid=meta(pod).get("uid")
            )
        except Exception as error:
            if not is_status(error, 404, 409):
                log.warning("pod %s: delete failed (%s)", key_of(pod), error)
