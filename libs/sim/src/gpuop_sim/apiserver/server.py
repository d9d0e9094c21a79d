"""SimApiServer: the in-memory kube-apiserver on 127.0.0.1, run in a thread or in the foreground."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import ssl
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

from gpuop_sim.apiserver import authn, events
from gpuop_sim.apiserver import controllers as ctrl
from gpuop_sim.apiserver.app import Router
from gpuop_sim.apiserver.authn import Authenticator
from gpuop_sim.apiserver.core import ApiCore, WriteOptions
from gpuop_sim.apiserver.establish import CrdEstablisher
from gpuop_sim.apiserver.faults import Faults, RequestRecord, RequestStats
from gpuop_sim.apiserver.podlog import PodLogSource
from gpuop_sim.apiserver.resources import ResourceRegistry
from gpuop_sim.apiserver.store import Store
from gpuop_sim.apiserver.watch import WatchHub

JsonObj = dict[str, Any]
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "default", "kube-node-lease")


class SimApiServer:
    """An in-memory Kubernetes API server speaking JSON over plain HTTP.

    `controllers` switches on controller stand-ins (garbage collection, namespace deletion,
    default ServiceAccounts, kube-root-ca.crt): True for all, False for a bare kube-apiserver,
    or an iterable of names from `controllers.ALL_CONTROLLERS`."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        controllers: bool | Iterable[str] = True,
        *,
        history_limit: int = 10_000,
        bookmark_interval: float = 2.0,
        compaction_interval: float | None = None,
        ssl_context: ssl.SSLContext | None = None,
        authenticator: Authenticator | None = None,
    ) -> None:
        self.host = host
        # HTTPS with this context (a client CA loaded in it makes client certificates count), and
        # who may call; by default plain HTTP and anyone, as most tests want.
        self._ssl_context = ssl_context
        self._authenticator = authenticator
        self._requested_port = port
        self._enabled = ctrl.resolve(controllers)
        self.registry = ResourceRegistry()
        self.store = Store(history_limit=history_limit)
        self.store.mirrors[("", "events")] = (("events.k8s.io", "events"), events.core_to_v1)
        self.store.mirrors[("events.k8s.io", "events")] = (("", "events"), events.v1_to_core)
        self.core = ApiCore(self.registry, self.store)
        self.faults = Faults()
        self._stats = RequestStats()
        self.hub = WatchHub(self.store, bookmark_interval)
        self.faults.on_drop(self._drop_watches)
        self.router = Router(self.core, self.hub, self.faults, self._stats)
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._stopped: asyncio.Event | None = None
        self._ready = threading.Event()
        self._establisher: CrdEstablisher | None = None
        self._controllers: ctrl.Controllers | None = None
        self._compaction_interval = compaction_interval
        self._error: BaseException | None = None

    # ---------------------------------------------------------------- lifecycle
    @property
    def pod_logs(self) -> PodLogSource | None:
        """Where pods/log reads container logs (the kubelets' files); None serves empty logs."""
        return self.router.pod_logs

    @pod_logs.setter
    def pod_logs(self, source: PodLogSource | None) -> None:
        self.router.pod_logs = source

    @property
    def url(self) -> str:
        scheme = "https" if self._ssl_context is not None else "http"
        return f"{scheme}://{self.host}:{self.port or self._requested_port}"

    def start(self) -> SimApiServer:
        """Serve from a daemon thread; returns once the socket is listening."""
        if self._thread is not None:
            return self
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(target=self._thread_main, name="sim-apiserver", daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("simulated API server did not start within 30 s")
        if self._error is not None:
            self._thread = None
            raise RuntimeError(f"simulated API server failed to start: {self._error}") from self._error
        return self

    def _thread_main(self) -> None:
        try:
            asyncio.run(self.serve())
        except BaseException as exc:  # surfaced to start() and never lost silently
            self._error = exc
            self._ready.set()

    async def serve(self) -> None:
        """Run on the current event loop until stop() (or SIGTERM via run_forever)."""
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        if self._establisher is None or self._controllers is None:
            self._establisher = CrdEstablisher(self.core, self._loop, self.hub.drop)
            self._controllers = ctrl.Controllers(self.core, self._enabled, self._loop)
            self._bootstrap()
        else:
            # A restart keeps the stored state (like etcd) and serves it from the new loop.
            self._establisher.loop = self._loop
            self._controllers.loop = self._loop
        middlewares = [authn.middleware(self._authenticator)] if self._authenticator is not None else []
        app = web.Application(client_max_size=64 * 1024 * 1024, middlewares=middlewares)
        app.router.add_route("*", "/{tail:.*}", self.router.handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        # A restarted server comes back on the port it had, so clients can reconnect.
        site = web.TCPSite(
            self._runner,
            self.host,
            self.port or self._requested_port,
            reuse_address=True,
            ssl_context=self._ssl_context,
        )
        await site.start()
        server = site._server
        assert server is not None
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else self._requested_port
        self.router.address = f"{self.host}:{self.port}"
        self._ready.set()
        compactor = asyncio.ensure_future(self._compact_periodically()) if self._compaction_interval else None
        try:
            await self._stopped.wait()
        finally:
            if compactor is not None:
                compactor.cancel()
            self.hub.drop()
            await self._runner.cleanup()

    async def _compact_periodically(self) -> None:
        """Like kube-apiserver's --etcd-compaction-interval."""
        assert self._compaction_interval is not None
        while True:
            await asyncio.sleep(self._compaction_interval)
            self.store.compact()

    def run_forever(self) -> None:
        """Serve in the foreground until SIGTERM/SIGINT (for the `gpuop-sim` CLI)."""

        async def main() -> None:
            loop = asyncio.get_running_loop()
            task = asyncio.ensure_future(self.serve())
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._request_stop)
            await task

        asyncio.run(main())

    def _request_stop(self) -> None:
        if self._stopped is not None:
            self._stopped.set()

    def stop(self) -> None:
        """Stop serving (open watches end); the state is kept, so start() again resumes it."""
        if self._loop is not None and self._stopped is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
            self._loop = None

    def __enter__(self) -> SimApiServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ---------------------------------------------------------------- what a fresh cluster holds
    def _bootstrap(self) -> None:
        ns_rt = self.registry.get("", "v1", "namespaces")
        pc_rt = self.registry.get("scheduling.k8s.io", "v1", "priorityclasses")
        svc_rt = self.registry.get("", "v1", "services")
        assert ns_rt and pc_rt and svc_rt
        for rt in self.registry.all():
            self.store.ensure_table(rt.key)
        opts = WriteOptions(field_manager="kube-apiserver")
        for name in SYSTEM_NAMESPACES:
            self.core.create(
                ns_rt, "", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}, opts
            )
        for name, value in (("system-node-critical", 2000001000), ("system-cluster-critical", 2000000000)):
            self.core.create(
                pc_rt,
                "",
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                    "description": "Used for system critical pods that must "
                    "not be moved from their current node.",
                },
                opts,
            )
        self.core.create(
            svc_rt,
            "default",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": "kubernetes",
                    "labels": {"component": "apiserver", "provider": "kubernetes"},
                },
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": 6443}]},
            },
            opts,
        )
        # Built-in watch windows start after the bootstrap writes, like a fresh watch cache.
        for rt in self.registry.all():
            self.store.ensure_table(rt.key)

    # ---------------------------------------------------------------- test helpers
    def _drop_watches(self, plural: str | None) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.hub.drop, plural)

    def stats(self) -> dict[tuple[str, str], int]:
        """Served requests by (verb, resource plural), e.g. {("patch", "nodes"): 1000}."""
        return self._stats.snapshot()

    def reset_stats(self) -> None:
        """Zero the counters and clear the request log."""
        self._stats.reset()

    def requests(self) -> list[RequestRecord]:
        """The most recent served requests (method, path, query, Content-Type, Accept, status)."""
        return self._stats.requests()

    def compact(self, *, watch_history: bool = False) -> None:
        """Compact now: older Exact lists and continue tokens answer 410 Gone; with
        `watch_history=True` watches from older resourceVersions get 410 too."""
        self.call(lambda: self.store.compact(watch_history=watch_history))

    def call(self, fn: Any, *args: Any) -> Any:
        """Run `fn(*args)` on the server's loop thread and return its result (thread-safe)."""
        if self._loop is None:
            return fn(*args)

        async def run() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=30)

    def write_kubeconfig(self, path: str | Path, *, namespace: str = "default") -> Path:
        """A kubeconfig for kubectl and `kubernetes.config.load_kube_config` (no auth, plain HTTP)."""
        if not (self.port or self._requested_port):
            raise RuntimeError("write_kubeconfig() needs the port: call start() first (or pass port=...)")
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gpuop-sim", "cluster": {"server": self.url}}],
            "users": [{"name": "gpuop-sim", "user": {"token": "gpuop-sim-" + uuid.uuid4().hex[:8]}}],
            "contexts": [
                {
                    "name": "gpuop-sim",
                    "context": {"cluster": "gpuop-sim", "user": "gpuop-sim", "namespace": namespace},
                }
            ],
            "current-context": "gpuop-sim",
            "preferences": {},
        }
        target.write_text(yaml.safe_dump(config, sort_keys=False))
        return target


def load_json(path: str | Path) -> JsonObj:
    data: JsonObj = json.loads(Path(path).read_text())
    return data
