"""SimCluster: an API server, simulated GPU nodes, controllers and kubelets in one object.

    with SimCluster(amd_nodes=2, nvidia_nodes=1) as cluster:
        subprocess.run([kubectl, "--kubeconfig", cluster.kubeconfig, "get", "nodes"])
        cluster.wait_for(lambda: ..., timeout=30)

Each node gets a fixture host root under `<state_dir>/nodes/<node>/` (sysfs/KFD trees or fake NVML
state), a loopback address of its own (127.10.x.y, which pods on it bind to and report as their IP),
a Node object labelled like a real one (hostname/os/arch/instance-type and the NFD PCI-presence
label), and a simulated kubelet that reports it Ready. State dirs stay short on purpose: unix socket
paths under a node root must fit in 107 bytes.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from gpuop_sim import hostfakes
from gpuop_sim.apiserver import SimApiServer
from gpuop_sim.crilog import PodLogFiles, instance_log, instances, read_content
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo, build_node_root
from gpuop_sim.registration import deregister_nodes, register_node
from gpuop_sim.shortpaths import short_tmp_dir, untraversable_parent
from gpuop_sim.workloads.kubeapi import EVENTS, PODS, KubeRest, Resource
from gpuop_sim.workloads.manager import ControllerManager
from gpuop_sim.workloads.objects import Obj
from gpuop_sim.workloads.simkubelet.imagestore import LocalImages
from gpuop_sim.workloads.simkubelet.runc import RuncEngine
from gpuop_sim.workloads.simkubelet.runtime import PODS_MODES, DeviceSource, PodsMode, SimKubelets
from gpuop_sim.workloads.simkubelet.stub import StubOutcomeFn
from gpuop_sim.workloads.simkubelet.worker import NodeRuntime

log = logging.getLogger(__name__)

AMD_PROFILES = ("amd-mi300x-cpx", "amd-mi210x8", "amd-mi300x-spx", "amd-single", "amd-radeon")
NVIDIA_PROFILES = ("nvidia-h100x8", "nvidia-h100x8-mig")
PCI_VENDOR_IDS = {"amd": "1002", "nvidia": "10de"}
PROFILE_LABEL = "gpuop.dev/sim-profile"
NODE_CAPACITY = {"cpu": "64", "memory": "527988696Ki", "pods": "110", "ephemeral-storage": "1843201024Ki"}


class SimClusterError(RuntimeError):
    """The simulated cluster could not start or a wait timed out."""


@dataclass(frozen=True)
class SimNode:
    """One simulated node as a test or the demo sees it."""

    name: str
    profile: str
    vendor: str
    gpu_count: int
    root: Path
    address: str
    env: Mapping[str, str] = field(default_factory=dict)
    partitions: int = 0  # AMD compute partitions / NVIDIA MIG devices
    driver_loaded: bool = True  # False: GPUs on the PCI bus only until the host fakes load the driver


def node_address(index: int) -> str:
    """Loopback address of node `index`: 127.10.0.1, 127.10.0.2, ... (254 per /24).

    GPUOP_SIM_NODE_NET (default `127.10`) moves the /16, so two process-mode clusters on one
    machine (two checkouts testing at once) don't fight over the same pod ports.
    """
    net = os.environ.get("GPUOP_SIM_NODE_NET", "127.10")
    return f"{net}.{index // 254}.{index % 254 + 1}"


def profile_vendor(profile: str) -> str:
    """`amd-mi210x8` -> `amd`; node names and PCI labels follow the vendor."""
    for vendor in PCI_VENDOR_IDS:
        if profile.startswith(f"{vendor}-"):
            return vendor
    return "cpu"


def plan_profiles(amd_nodes: int, nvidia_nodes: int, cpu_nodes: int = 0) -> list[str]:
    """Profiles for the requested counts, cycling through each vendor's list."""
    return [
        *itertools.islice(itertools.cycle(AMD_PROFILES), amd_nodes),
        *itertools.islice(itertools.cycle(NVIDIA_PROFILES), nvidia_nodes),
        *(["cpu-only"] * cpu_nodes),
    ]


def node_object(node: SimNode) -> Obj:
    """The Node a kubelet would register for this host, with the labels NFD would add."""
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": f"sim.{node.profile}",
        PROFILE_LABEL: node.profile,
    }
    vendor_id = PCI_VENDOR_IDS.get(node.vendor)
    if vendor_id and node.gpu_count:
        labels[f"feature.node.kubernetes.io/pci-{vendor_id}.present"] = "true"
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node.name, "labels": labels}, "spec": {}}


def node_status(node: SimNode) -> Obj:
    return {
        "capacity": dict(NODE_CAPACITY),
        "allocatable": dict(NODE_CAPACITY),
        "nodeInfo": {
            "machineID": node.name,
            "systemUUID": node.name,
            "bootID": node.name,
            "kernelVersion": "6.8.0-sim",
            "osImage": "gpuop simulated node",
            "containerRuntimeVersion": "sim://0.1.0",
            "kubeletVersion": "v1.36.0-sim",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def _emulator_source(node: NodeRuntime, notify: Callable[[], None]) -> DeviceSource:
    emulator = KubeletEmulator(node.root, on_change=lambda _snapshot: notify())
    return emulator.start()


class SimCluster:
    """Start with `start()` (or `with`), stop with `stop()`: every process it started is gone after."""

    def __init__(
        self,
        state_dir: str | Path | None = None,
        *,
        amd_nodes: int = 0,
        nvidia_nodes: int = 0,
        cpu_nodes: int = 0,
        profiles: Sequence[str] | None = None,
        pods: PodsMode = "process",
        host: str = "127.0.0.1",
        port: int = 0,
        kubeconfig: str | Path | None = None,
        image_commands: Mapping[str, list[str]] | None = None,
        device_plugins: bool | None = None,
        node_roots: bool | None = None,
        max_grace_seconds: float = 3.0,
        scripts_dir: Path | None = None,
        stub_outcome: StubOutcomeFn | None = None,
        driver_loaded: bool = True,
        reboot_down_seconds: float = 1.0,
        control_plane: bool = True,
        name_prefix: str = "",
        node_monitor_grace_period: float | None = None,
        image_store: Sequence[str] | None = None,
    ) -> None:
        if pods not in PODS_MODES:
            raise ValueError(f"pods must be one of {', '.join(map(repr, PODS_MODES))}, not {pods!r}")
        if pods == "container" and os.geteuid() != 0:
            raise ValueError("pods='container' needs root: runc makes namespaces, overlay and bind mounts")
        missing = [tool for tool in ("runc", "podman") if pods == "container" and shutil.which(tool) is None]
        if missing:
            raise ValueError(
                f"pods='container' needs {' and '.join(missing)} (Debian packages of those names)"
            )
        if not control_plane and kubeconfig is None:
            raise ValueError("joining an existing cluster (control_plane=False) needs its kubeconfig")
        # True: run the simulated control plane and write its kubeconfig to `kubeconfig`. False: join
        # the cluster `kubeconfig` names with the node side only (no server, no controllers).
        self.control_plane = control_plane
        self._name_prefix = name_prefix
        self._node_grace = node_monitor_grace_period
        self.profiles = (
            list(profiles) if profiles is not None else plan_profiles(amd_nodes, nvidia_nodes, cpu_nodes)
        )
        self.pods_mode: PodsMode = pods
        self._owns_state_dir = state_dir is None
        # Absolute: node roots, volumes and kubeconfigs are handed to containers, which run elsewhere.
        self.state_dir = Path(state_dir).resolve() if state_dir else short_tmp_dir("gpuop-sim-")
        self.kubeconfig = Path(kubeconfig).resolve() if kubeconfig else self.state_dir / "kubeconfig"
        self._host, self._port = host, port
        self._image_commands = dict(image_commands or {})
        # Device plugins need one kubelet emulator (gRPC servers) per node: on by default only where
        # pods really run; 1,000 stub nodes would not afford them.
        runs_pods = pods != "stub"
        self._device_plugins = runs_pods if device_plugins is None else device_plugins
        # Each node's own host root matters only where agents really read it; stub nodes of one
        # profile share a single root (laying 1,000 roots costs over a minute, deleting them more).
        self._node_roots = runs_pods if node_roots is None else node_roots
        if self._device_plugins and not self._node_roots:
            raise ValueError(
                "device_plugins needs node_roots: each node's kubelet sockets live in its own root"
            )
        self._max_grace = max_grace_seconds
        # Container mode: the podman command (and store options) images come from; None: podman's
        # vfs store, where `make images` builds them.
        self._image_store = list(image_store) if image_store is not None else None
        self._scripts_dir = scripts_dir or Path(sys.executable).parent
        if stub_outcome is not None and pods != "stub":
            raise ValueError("stub_outcome needs pods='stub'; process pods run their real programs")
        self._stub_outcome = stub_outcome
        # False: every GPU node starts with its PCI devices but no driver (build_node_root's flag).
        self.driver_loaded = driver_loaded
        self._reboot_down = reboot_down_seconds
        self._reboot_locks: dict[str, threading.Lock] = {}
        self._watch_stop = threading.Event()
        self._reboot_watch: threading.Thread | None = None
        self.nodes: list[SimNode] = []
        self.server: SimApiServer | None = None
        self.rest: KubeRest | None = None
        self.controllers: ControllerManager | None = None
        self.kubelets: SimKubelets | None = None
        self.engine: RuncEngine | None = None  # container mode's runc and image store

    def _check_reachable_by_containers(self) -> None:
        """Process containers run as their image's user: refuse a state dir, kubeconfig or Python
        environment they could not reach (a 0700 parent, as tempfile.mkdtemp makes, or a checkout
        under root's own 0700 home), rather than leave every pod to crash later. On a node the
        image's files are always reachable; here the environment (`sys.prefix`) stands for them."""
        if self.pods_mode != "process" or os.geteuid() != 0:
            return
        reached = (
            (self.state_dir, "the node roots and volumes"),
            (self.kubeconfig.parent, "the kubeconfig"),
            (Path(sys.prefix), "the Python environment their programs run from"),
        )
        for path, what in reached:
            closed = untraversable_parent(path)
            if closed is not None:
                raise ValueError(
                    f"{closed} (under {path}) is closed to other users; process-mode containers run "
                    f"as their image's user (e.g. 65532) and could not reach {what}: make it 0755 "
                    "(or 1777 for a temp dir), or move the checkout"
                )

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> SimCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._check_reachable_by_containers()
        if self.control_plane:
            self._start_api_server()
        # The kubernetes client's own loader: TLS, client certificates, tokens and exec plugins.
        self.rest = KubeRest.from_kubeconfig(self.kubeconfig)
        self.nodes = self._build_nodes()
        for node in self.nodes:
            register_node(self.rest, node_object(node), node_status(node))
        if self.control_plane:
            grace = {} if self._node_grace is None else {"node_monitor_grace_period": self._node_grace}
            self.controllers = ControllerManager(self.rest, **grace)
            self.controllers.start()
        self._start_node_side()

    def _start_api_server(self) -> None:
        self.server = SimApiServer(host=self._host, port=self._port, controllers=True)
        # pods/log reads the files the simulated kubelets write (a real server asks the node's kubelet).
        self.server.pod_logs = PodLogFiles(self.state_dir / "pods")
        self.server.start()
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        self.server.write_kubeconfig(self.kubeconfig)

    def _start_node_side(self) -> None:
        """What `gpuop-sim join` runs against any cluster, and `serve` against its own."""
        assert self.rest is not None
        if self.pods_mode == "container":
            images = LocalImages(self._image_store) if self._image_store else None
            self.engine = RuncEngine(self.state_dir / "runc", images)
            for node in self.nodes:
                hostfakes.install_on_host(node.root)
        runtimes = [self._runtime(node) for node in self.nodes]
        self.kubelets = SimKubelets(
            self.rest,
            runtimes,
            self.pods_mode,
            device_sources=_emulator_source if self._device_plugins else None,
            stub_outcome=self._stub_outcome,
        )
        self.kubelets.start()
        if self._node_roots:
            self._start_reboot_watch()

    def _build_nodes(self) -> list[SimNode]:
        nodes = []
        per_vendor: dict[str, int] = {}
        shared: dict[str, tuple[Path, NodeRootInfo]] = {}
        for index, profile in enumerate(self.profiles):
            vendor = profile_vendor(profile)
            number = per_vendor.get(vendor, 0)
            per_vendor[vendor] = number + 1
            name = f"{self._name_prefix}{vendor}-{number}"
            if self._node_roots:
                root = self.state_dir / "nodes" / name
                info = build_node_root(profile, root, node_name=name, driver_loaded=self.driver_loaded)
            else:
                if profile not in shared:
                    shared_root = self.state_dir / "profiles" / profile
                    shared[profile] = (
                        shared_root,
                        build_node_root(profile, shared_root, driver_loaded=self.driver_loaded),
                    )
                root, info = shared[profile]
            nodes.append(
                SimNode(
                    name=name,
                    profile=profile,
                    vendor=vendor,
                    gpu_count=int(info.gpu_count),
                    root=root,
                    address=node_address(index),
                    env=dict(info.env),
                    partitions=int(info.partition_count),
                    driver_loaded=info.driver_loaded,
                )
            )
        return nodes

    def _runtime(self, node: SimNode) -> NodeRuntime:
        return NodeRuntime(
            name=node.name,
            root=node.root,
            address=node.address,
            env=node.env,
            kubeconfig=self.kubeconfig,
            scripts_dir=self._scripts_dir,
            pods_dir=self.state_dir / "pods" / node.name,
            image_commands=self._image_commands,
            max_grace_seconds=self._max_grace,
            engine=self.engine,
        )

    def stop(self) -> None:
        """Stop kubelets (terminating every pod process), controllers and the API server."""
        self._watch_stop.set()
        if self._reboot_watch is not None:
            self._reboot_watch.join(timeout=5)
            self._reboot_watch = None
        for node in self.nodes if self._node_roots else []:
            (node.root / hostfakes.REBOOTER).unlink(missing_ok=True)
        if self.kubelets is not None:
            self.kubelets.stop()
            self.kubelets = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if self.controllers is not None:
            self.controllers.stop()
            self.controllers = None
        if self.rest is not None:
            if not self.control_plane:
                deregister_nodes(self.rest, [node.name for node in self.nodes])
            self.rest.close()
            self.rest = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self._owns_state_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __enter__(self) -> SimCluster:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- reboots ---------------------------------------------------------------------------------
    def reboot_node(self, name: str, down_seconds: float | None = None) -> str:
        """Reboot simulated node `name`; returns its new `status.nodeInfo.bootID`.

        A watcher sees Ready go False (KubeletNotReady, with the not-ready taint) and come back True,
        the bootID change, and every container on the node restarted as after a real reboot (the
        restartCount of restartPolicy Always/OnFailure containers goes up; a running Never pod, e.g.
        a Job's, fails). While the node is down its host root goes through `hostfakes.boot` (loaded
        modules gone, /etc/modules-load.d and in-box drivers loaded again); not on stub nodes that
        share one root per profile. `reboot` / `systemctl reboot` run by a pod on the node ends here.
        """
        node = self.node(name)
        kubelets = self.kubelets
        if kubelets is None:
            raise SimClusterError("the simulated cluster is not running")
        with self._reboot_locks.setdefault(name, threading.Lock()):
            return kubelets.reboot_node(
                name,
                down_seconds=self._reboot_down if down_seconds is None else down_seconds,
                while_down=(lambda: hostfakes.boot(node.root)) if self._node_roots else None,
            )

    def _start_reboot_watch(self) -> None:
        """Note this process in each node root, so the fake `reboot` asks us instead of booting."""
        for node in self.nodes:
            hostfakes.write_file(node.root / hostfakes.REBOOTER, str(os.getpid()))
            (node.root / hostfakes.REBOOT_REQUEST).unlink(missing_ok=True)
        self._reboot_watch = threading.Thread(target=self._watch_reboots, name="sim-reboots", daemon=True)
        self._reboot_watch.start()

    def _watch_reboots(self) -> None:
        while not self._watch_stop.wait(0.1):
            for node in self.nodes:
                request = node.root / hostfakes.REBOOT_REQUEST
                if not request.exists():
                    continue
                request.unlink(missing_ok=True)
                log.info("node %s: the host asked for a reboot", node.name)
                threading.Thread(
                    target=self._reboot_quietly, args=(node.name,), name=f"reboot-{node.name}", daemon=True
                ).start()

    def _reboot_quietly(self, name: str) -> None:
        try:
            self.reboot_node(name)
        except Exception:
            if not self._watch_stop.is_set():
                log.exception("node %s: simulated reboot failed", name)

    def push_image(self, image: str, argv: list[str]) -> None:
        """Make `image` pullable from now on, as pushing it to the registry would (`image_commands`):
        a pod waiting in ImagePullBackOff starts at its next pull, when its back-off expires."""
        self._image_commands[image] = list(argv)

    def set_stub_outcome(self, outcome: StubOutcomeFn | None) -> None:
        """Test hook for stub pods: `outcome(pod) -> StubOutcome | None` decides how each stub pod
        that starts from now on runs (Running `duration_s`, then exits with `exit_code` and
        `termination_message`); None (or a hook answering None) keeps the default behaviour."""
        if self.pods_mode != "stub":
            raise ValueError("stub outcomes need pods='stub'; process pods run their real programs")
        self._stub_outcome = outcome
        if self.kubelets is not None:
            self.kubelets.set_stub_outcome(outcome)

    # -- accessors -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self.control_plane:
            return self._server().url
        return str(self.api().api_client.configuration.host)

    @property
    def port(self) -> int:
        if self.control_plane:
            return int(self._server().port)
        return int(urlsplit(self.url).port or (443 if self.url.startswith("https://") else 80))

    def api(self) -> KubeRest:
        if self.rest is None:
            raise SimClusterError("the simulated cluster is not running")
        return self.rest

    def node(self, name: str) -> SimNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no simulated node named {name!r}")

    def kubelet_emulator(self, node: str) -> KubeletEmulator:
        """The node's kubelet emulator (device plugins, pod-resources); only with device_plugins on."""
        source = self.kubelets.device_sources.get(node) if self.kubelets else None
        if not isinstance(source, KubeletEmulator):
            raise SimClusterError(
                f"node {node!r} runs no kubelet emulator (device_plugins is off or no such node)"
            )
        return source

    def pod_logs_report(self, namespace: str, tail: int = 3000) -> str:
        """Every container's last `tail` characters of log in the namespace (a pod without logs: its
        status): what a failed wait in a test prints so the reason shows with the failure."""
        lines: list[str] = []
        for pod in self.api().list(PODS, namespace)[0]:
            name = pod["metadata"]["name"]
            for container in pod["spec"]["containers"]:
                try:
                    log = self.pod_log(namespace, name, container["name"])[-tail:]
                    lines.append(f"{name}/{container['name']}: {log}")
                except FileNotFoundError:
                    lines.append(f"{name}/{container['name']}: no log; status {pod.get('status')}")
        return "\n".join(lines)

    def pod_log(self, namespace: str, name: str, container: str) -> str:
        """What a `process` pod's container wrote to stdout/stderr: every instance of the newest pod of
        that name, oldest first (`kubectl logs` shows only the current one, `--previous` the one before)."""
        candidates = sorted(
            (d for d in self.state_dir.glob(f"pods/*/{namespace}_{name}_*/logs/{container}") if instances(d)),
            key=lambda d: d.stat().st_mtime,
            reverse=True,
        )
        if not candidates:
            raise FileNotFoundError(f"no log for container {container!r} of pod {namespace}/{name}")
        newest = candidates[0]
        return "".join(read_content(instance_log(newest, n)) for n in instances(newest))

    def _server(self) -> SimApiServer:
        if self.server is None:
            raise SimClusterError("the simulated cluster is not running")
        return self.server

    # -- waiting ---------------------------------------------------------------------------------
    def wait_for(
        self,
        predicate: Callable[[], Any],
        timeout: float = 30.0,
        interval: float = 0.05,
        what: str = "condition",
    ) -> Any:
        """Poll `predicate` until it returns something truthy; SimClusterError after `timeout`."""
        deadline = time.monotonic() + timeout
        last_error: Exception | None = None
        while True:
            try:
                result = predicate()
                if result:
                    return result
            except Exception as error:  # transient: the object may not exist yet
                last_error = error
            if time.monotonic() >= deadline:
                detail = f" (last error: {last_error})" if last_error else ""
                raise SimClusterError(f"timed out after {timeout}s waiting for {what}{detail}")
            time.sleep(interval)

    def wait_for_object(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        predicate: Callable[[Obj], Any] = bool,
        timeout: float = 30.0,
    ) -> Obj:
        """The object once `predicate(obj)` holds."""

        def check() -> Obj | None:
            obj = self.api().get(resource, name, namespace)
            return obj if predicate(obj) else None

        result: Obj = self.wait_for(check, timeout, what=f"{resource.kind} {namespace or ''}/{name}")
        return result

    def wait_for_events(
        self,
        namespace: str | None,
        predicate: Callable[[list[Obj]], Any],
        timeout: float = 30.0,
        what: str = "events",
    ) -> list[Obj]:
        """The Events of `namespace` (None: all) once `predicate(events)` holds.

        Controllers record an Event after the write it reports (as on a real cluster, where Events
        are best-effort and asynchronous), so a test that saw the write must wait for its Event.
        """

        def check() -> list[Obj] | None:
            events, _ = self.api().list(EVENTS, namespace)
            return events if predicate(events) else None

        result: list[Obj] = self.wait_for(check, timeout, what=what)
        return result

    def wait_for_daemonset_ready(self, name: str, namespace: str, timeout: float = 60.0) -> Obj:
        """The DaemonSet once every desired pod is updated and ready (and at least `desired` observed)."""
        from gpuop_sim.workloads.kubeapi import DAEMONSETS

        def ready(ds: Obj) -> bool:
            status = ds.get("status") or {}
            desired = status.get("desiredNumberScheduled")
            return (
                desired is not None
                and status.get("observedGeneration") == (ds.get("metadata") or {}).get("generation")
                and status.get("numberReady") == desired
                and status.get("updatedNumberScheduled") == desired
                and status.get("currentNumberScheduled") == desired
                and not status.get("numberMisscheduled")
            )

        return self.wait_for_object(DAEMONSETS, name, namespace, ready, timeout)
