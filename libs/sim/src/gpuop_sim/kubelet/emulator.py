"""KubeletEmulator: the kubelet's gRPC side on real unix sockets under a root directory.

Serves device-plugin Registration on `<socket_dir>/kubelet.sock` and pod-resources on its socket, and
watches plugins_registry/ for plugin-watcher registrations (device plugins and DRA drivers). Plugins
under test talk to it exactly as to a kubelet; the simulated cluster reads node capacity from it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from gpuop_common.kubelet import (
    UnixServer,
    check_socket_path,
    drahealth,
    is_socket,
    serve_unix,
)
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_common.kubelet import pluginregistration as reg
from gpuop_common.kubelet import podresources as pr

from .devicemanager import THREAD_PREFIX, Allocation, DeviceManager, DeviceManagerConfig
from .dra import DraClaim, DraPlugins, PreparedClaim, PrepareResult
from .draclaims import ClaimUsers
from .drahealth import DeviceKey, DraDeviceHealth
from .pluginwatcher import (
    DevicePluginHandler,
    DraPluginHandler,
    PluginHandler,
    PluginWatcher,
    RegisteredPlugin,
    WatcherConfig,
)
from .podresources import AssignmentStore, PodAssignment, PodResourcesServer, TokenBucket
from .state import DeviceSnapshot, KubeletEmulatorError

log = logging.getLogger(__name__)

ChangeCallback = Callable[[DeviceSnapshot], None]


def _under(root: Path, absolute: str) -> Path:
    return root / absolute.lstrip("/")


class KubeletEmulator:
    """Thread-safe; `start()` / `stop()` (or use it as a context manager), `restart()` in between."""

    def __init__(
        self,
        root: Path | str,
        *,
        socket_dir: Path | str | None = None,
        pod_resources_socket: Path | str | None = None,
        plugins_registry: Path | str | None = None,
        dial_timeout: float = 10.0,
        rpc_timeout: float = 10.0,
        endpoint_grace_s: float = 300.0,
        watch_interval_s: float = 0.1,
        dra_health_retry_s: float = drahealth.STREAM_RETRY_S,
        pod_resources_qps: float | None = pr.POD_RESOURCES_QPS,
        pod_resources_burst: int = pr.POD_RESOURCES_BURST,
        on_change: ChangeCallback | None = None,
    ) -> None:
        self.root = Path(root).absolute()
        self.socket_dir = Path(socket_dir) if socket_dir else _under(self.root, dp.DEVICE_PLUGIN_PATH)
        self.kubelet_socket = check_socket_path(self.socket_dir / dp.KUBELET_SOCKET_NAME)
        self.pod_resources_socket = check_socket_path(
            pod_resources_socket or _under(self.root, pr.POD_RESOURCES_SOCKET)
        )
        self.plugins_registry = (
            Path(plugins_registry) if plugins_registry else _under(self.root, reg.PLUGINS_REGISTRY_DIR)
        )
        self._changed = threading.Condition()
        self._listeners: list[ChangeCallback] = [on_change] if on_change else []
        self._devices = DeviceManager(
            DeviceManagerConfig(self.socket_dir, dial_timeout, rpc_timeout, endpoint_grace_s),
            self._devices_changed,
        )
        self._assignments = AssignmentStore()
        self._limits = (pod_resources_qps, pod_resources_burst)
        self._dra = DraPlugins(health_retry_s=dra_health_retry_s, on_change=self._notify)
        self._claim_users = ClaimUsers()
        handlers: dict[str, PluginHandler] = {
            reg.DEVICE_PLUGIN: DevicePluginHandler(self._devices),
            reg.DRA_PLUGIN: DraPluginHandler(self._dra),
        }
        self._watcher = PluginWatcher(
            WatcherConfig(self.plugins_registry, watch_interval_s, dial_timeout), handlers, self._notify
        )
        self._allocation_lock = threading.Lock()
        self._lifecycle = threading.Lock()
        self._servers: list[UnixServer] = []
        self._running = False

    # --- lifecycle ---

    def start(self) -> KubeletEmulator:
        with self._lifecycle:
            if self._running:
                return self
            self._start_locked()
        return self

    def stop(self) -> None:
        """Stop every server, stream and thread; remove the sockets this emulator created."""
        with self._lifecycle:
            if not self._running:
                return
            self._stop_locked(keep_resources=False)
            self._dra.close()

    def restart(self) -> None:
        """Like a kubelet restart: plugin streams drop and every socket in socket_dir is deleted.

        Plugins must notice (kubelet.sock is re-created) and register again; until they do, their
        resources read zero. Pod device assignments survive, as in the kubelet's checkpoint.
        """
        with self._lifecycle:
            if self._running:
                self._stop_locked(keep_resources=True)
            self._start_locked()

    def __enter__(self) -> KubeletEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start_locked(self) -> None:
        for directory in (self.socket_dir, self.pod_resources_socket.parent, self.plugins_registry):
            directory.mkdir(parents=True, exist_ok=True, mode=0o750)
        self._wipe_sockets()
        self._devices.reopen()
        self._write_checkpoint()
        limiter = TokenBucket(self._limits[0], self._limits[1]) if self._limits[0] else None
        lister = PodResourcesServer(self._assignments, self._devices.snapshot, limiter)
        self._servers = []
        try:
            self._servers.append(
                serve_unix(
                    self.pod_resources_socket,
                    [lambda s: pr.add_PodResourcesListerServicer_to_server(lister, s)],
                    thread_name_prefix=f"{THREAD_PREFIX}-podresources",
                )
            )
            # Registration last: a plugin that sees kubelet.sock may call it at once.
            self._servers.append(
                serve_unix(
                    self.kubelet_socket,
                    [lambda s: dp.add_RegistrationServicer_to_server(self._devices, s)],
                    thread_name_prefix=f"{THREAD_PREFIX}-registration",
                )
            )
        except Exception:
            for server in self._servers:
                server.stop(grace=None)
            self._servers = []
            raise
        self._watcher.start()
        self._running = True
        log.info("kubelet emulator listening on %s", self.kubelet_socket)

    def _stop_locked(self, keep_resources: bool) -> None:
        self._running = False
        self._watcher.stop()
        for server in reversed(self._servers):
            server.stop(grace=0.2)
        self._servers = []
        self._devices.drop_all(keep_resources=keep_resources)

    def _wipe_sockets(self) -> None:
        # The kubelet deletes every unix socket in the device-plugins dir at start; files and
        # sub-directories (its checkpoint included) stay.
        for entry in self.socket_dir.iterdir():
            if entry.name != dp.KUBELET_CHECKPOINT_NAME and is_socket(entry):
                entry.unlink(missing_ok=True)

    def _write_checkpoint(self) -> None:
        entries = [
            {
                "PodName": p.name,
                "Namespace": p.namespace,
                "ContainerName": c.name,
                "ResourceName": r,
                "DeviceIDs": d,
            }
            for p in self._assignments.pods()
            for c in p.containers
            for r, d in c.devices.items()
        ]
        registered = {r: sorted(devs) for r, devs in self._devices.snapshot().resources().items()}
        data = {"Data": {"PodDeviceEntries": entries, "RegisteredDevices": registered}}
        (self.socket_dir / dp.KUBELET_CHECKPOINT_NAME).write_text(json.dumps(data, indent=2))

    # --- change notification ---

    def add_change_listener(self, callback: ChangeCallback) -> None:
        """`callback(snapshot)` after every device change, e.g. to patch Node capacity/allocatable.

        It runs on the emulator's stream thread: keep it short and never call stop() from it.
        """
        with self._changed:
            self._listeners.append(callback)

    def _devices_changed(self) -> None:
        snapshot = self._devices.snapshot()
        with self._changed:
            listeners = list(self._listeners)
        for callback in listeners:
            try:
                callback(snapshot)
            except Exception:
                log.exception("kubelet emulator change listener %r failed", callback)
        self._notify()

    def _notify(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        """Block until `predicate()` is true (re-checked on every change); TimeoutError otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    name = getattr(predicate, "__name__", repr(predicate))
                    raise TimeoutError(f"condition {name} not met within {timeout:g}s")
                # Woken on every emulator change; the short cap also re-checks conditions on state
                # outside the emulator, such as a plugin's own.
                self._changed.wait(min(remaining, 0.05))

    # --- device plugin view ---

    def snapshot(self) -> DeviceSnapshot:
        return self._devices.snapshot()

    def resources(self) -> dict[str, dict[str, str]]:
        """resource -> device id -> health string, as last reported by each plugin."""
        return self._devices.snapshot().resources()

    def capacity(self) -> dict[str, int]:
        return self._devices.snapshot().capacity()

    def allocatable(self) -> dict[str, int]:
        return self._devices.snapshot().allocatable()

    def plugin_options(self, resource: str) -> dp.DevicePluginOptions | None:
        """The options the kubelet read with GetDevicePluginOptions, None when not registered."""
        return self._devices.options(resource)

    def get_preferred_allocation(
        self, resource: str, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        return self._devices.get_preferred_allocation(resource, available, must_include, size)

    def allocate(
        self,
        resource: str,
        devices: int | Sequence[str],
        *,
        pod: str | None = None,
        namespace: str = "default",
        container: str = "main",
    ) -> Allocation:
        """Admit one container: `devices` is a count (kubelet chooses) or explicit device ids.

        With a count the emulator picks among healthy, unassigned devices, asking the plugin's
        GetPreferredAllocation first when advertised; then Allocate (and PreStartContainer when
        required). With `pod` the devices are also assigned to the container for pod-resources.
        """
        with self._allocation_lock:
            allocation = self._devices.allocate(resource, devices, self._assignments.in_use(resource))
            if pod is not None:
                self._assignments.assign(pod, namespace, container, resource, allocation.device_ids)
        self._notify()
        return allocation

    # --- pod resources ---

    def assign(
        self, pod: str, namespace: str, container: str, resource: str, device_ids: Sequence[str]
    ) -> None:
        self._assignments.assign(pod, namespace, container, resource, device_ids)
        self._notify()

    def release(self, pod: str, namespace: str = "default") -> bool:
        """Forget a pod's devices (the pod ended); False when it had none."""
        released = self._assignments.release(pod, namespace)
        self._notify()
        return released

    def assignments(self) -> list[PodAssignment]:
        return self._assignments.pods()

    # --- plugin watcher and DRA ---

    def registered_plugins(self) -> list[RegisteredPlugin]:
        return self._watcher.registered()

    def registration_failures(self) -> dict[Path, str]:
        return self._watcher.failures()

    def dra_drivers(self) -> dict[str, str]:
        return self._dra.drivers()

    def prepare(self, driver: str, claims: Sequence[DraClaim]) -> dict[str, PrepareResult]:
        return self._dra.prepare(driver, claims)

    def unprepare(self, driver: str, claims: Sequence[DraClaim]) -> dict[str, str]:
        return self._dra.unprepare(driver, claims)

    def prepare_pod(
        self,
        driver: str,
        pod_uid: str,
        claims: Sequence[DraClaim],
        reserved_for: Mapping[str, Collection[str]] | None = None,
    ) -> dict[str, PrepareResult]:
        """A pod starting with these claims, as the kubelet does it: claims another pod already
        uses are not prepared again (the pod gets their prepared devices), the others are prepared
        in one call; a claim not reserved for the pod (`reserved_for`: claim uid -> pod uids of its
        status.reservedFor) is refused. Claim uid -> result."""
        new, refused = self._claim_users.to_prepare(pod_uid, claims, reserved_for)
        results = {uid: PrepareResult(error=error) for uid, error in refused.items()}
        if new:
            results |= self._dra.prepare(driver, new)
        prepared = self._dra.prepared_claims()
        for claim in claims:
            if claim.uid not in results and claim.uid in prepared:
                results[claim.uid] = PrepareResult(prepared[claim.uid].devices)
        self._claim_users.add(pod_uid, [uid for uid, r in results.items() if not r.error])
        return results

    def unprepare_pod(self, driver: str, pod_uid: str, claims: Sequence[DraClaim]) -> dict[str, str]:
        """A pod gone: NodeUnprepareResources for the claims no other pod uses any more (claim uid
        -> error, "" when unprepared); claims still in use are not in the answer."""
        last = self._claim_users.leave(pod_uid, claims)
        return self._dra.unprepare(driver, last) if last else {}

    def dra_claim_users(self, claim_uid: str) -> frozenset[str]:
        """The pods (uids) using a prepared claim."""
        return self._claim_users.users(claim_uid)

    def dra_prepared_claims(self) -> dict[str, PreparedClaim]:
        """Claim UID -> driver and devices, for every claim prepared and not unprepared since."""
        return self._dra.prepared_claims()

    def dra_device_health(self, driver: str) -> dict[DeviceKey, DraDeviceHealth]:
        """(pool, device) -> the latest health the driver's health stream reported for it."""
        return self._dra.device_health(driver)

    def dra_claim_health(self, claim_uid: str) -> dict[DeviceKey, DraDeviceHealth]:
        """(pool, device) -> health of each device of a prepared claim (Unknown when unreported):
        what the kubelet writes into the pod's status.containerStatuses[].allocatedResourcesStatus."""
        return self._dra.claim_health(claim_uid)


__all__ = ["ChangeCallback", "KubeletEmulator", "KubeletEmulatorError"]
