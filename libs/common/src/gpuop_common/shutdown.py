"""Graceful shutdown and the standard service wiring.

SIGTERM/SIGINT set a `Stopping` flag; loops wait on it (`stopping.wait(interval)`) instead of
sleeping, so they notice at once and leave at a safe point. A second signal, or the hard timeout
after the first one, ends the process immediately: a wedged call must not keep a pod Terminating
until the kubelet's SIGKILL.

`run_service` is what every service's `main()` calls: settings -> JSON logging -> probe server ->
the service's main function -> clean stop, and returns the process exit code.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry

from gpuop_common.logs import configure_logging
from gpuop_common.probes import ProbeServer
from gpuop_common.settings import AgentSettings, parse_settings

log = logging.getLogger(__name__)

FORCED_EXIT_CODE = 1
DEFAULT_SHUTDOWN_TIMEOUT_S = 25.0  # below the kubelet's default 30 s grace period

S = TypeVar("S", bound=AgentSettings)


class Stopping:
    """A stop flag that threads and asyncio tasks can wait on with a timeout."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []
        self.reason = ""

    def is_set(self) -> bool:
        return self._event.is_set()

    def __bool__(self) -> bool:
        return self._event.is_set()

    def set(self, reason: str = "requested") -> None:
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            waiters = list(self._async_waiters)
        for loop, event in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event.set)

    def wait(self, timeout: float | None = None) -> bool:
        """Block up to `timeout` seconds; True when stopping (use as `if stopping.wait(30): break`)."""
        return self._event.wait(timeout)

    async def wait_async(self, timeout: float | None = None) -> bool:
        """Asyncio flavour of `wait`: never blocks the loop."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        with self._lock:
            if self._event.is_set():
                return True
            self._async_waiters.append((loop, event))
        try:
            await asyncio.wait_for(event.wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._async_waiters.remove((loop, event))
        return self._event.is_set()


def _force_exit(message: str) -> None:
    log.error(message)
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(FORCED_EXIT_CODE)


def install_signal_handlers(
    stopping: Stopping,
    *,
    hard_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
    signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
) -> Callable[[], None]:
    """Route `signals` to `stopping`; returns a function restoring the previous handlers.

    Must be called from the main thread (a Python rule for signal handlers).
    """
    previous = {sig: signal.getsignal(sig) for sig in signals}
    timers: list[threading.Timer] = []

    received = itertools.count()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        # Counted first thing: a second signal may interrupt this very handler (Python runs handlers
        # between bytecodes), and it must still be seen as the second one.
        if next(received) > 0:
            _force_exit(f"second {signal.Signals(signum).name} while stopping: exiting now")
            return
        name = signal.Signals(signum).name
        stopping.set(f"signal {name}")
        timer = threading.Timer(
            hard_timeout, _force_exit, args=(f"did not stop within {hard_timeout}s: exiting now",)
        )
        timer.daemon = True
        timer.start()
        timers.append(timer)
        log.info("stopping", extra={"signal": name, "hard_timeout_s": hard_timeout})

    for sig in signals:
        signal.signal(sig, on_signal)

    def restore() -> None:
        # Stopped in time: the hard-exit timer must not fire on whatever the caller does next.
        for timer in timers:
            timer.cancel()
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


def run_periodic(step: Callable[[], None], *, interval: float, stopping: Stopping, once: bool = False) -> int:
    """Run `step` now and then every `interval` s until stopping; a failing step is logged and retried.

    Returns the exit code: with `once`, 1 if the single step failed, else 0.
    """
    while True:
        try:
            step()
        except Exception:
            log.exception("main loop step failed")
            if once:
                return 1
        if once or stopping.wait(interval):
            return 0


@dataclass
class ServiceContext(Generic[S]):
    """What a service's main function gets from `run_service`."""

    settings: S
    stopping: Stopping
    probes: ProbeServer


MainFunction = Callable[[ServiceContext[S]], int | Awaitable[int | None] | None]


def run_service(
    settings_cls: type[S],
    main: MainFunction[S],
    *,
    service: str,
    argv: Sequence[str] | None = None,
    registry: CollectorRegistry | None = None,
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
    probe_port: Callable[[S], int] | None = None,
    prerendered_metrics: bool = False,
    health_aliases: Sequence[str] = (),
) -> int:
    """Parse settings, set up logging, probes and signals, run `main`, stop cleanly; returns exit code.

    `main` may be sync or async; it should return when `ctx.stopping` is set. Readiness is its job
    (`ctx.probes.set_ready(True)` once it serves). `registry` is served on the probe port's /metrics;
    with `prerendered_metrics`, /metrics serves what `main` passes to `ctx.probes.set_metrics_source`
    (503 until then). `probe_port` picks the listener's port from the settings (default: the
    `--probe-port` field), so a service whose one port is e.g. `--port` serves everything there.
    """
    settings = parse_settings(settings_cls, argv, prog=f"gpuop-{service}")
    configure_logging(settings.log_level, service=service, node=settings.node_name)
    stopping = Stopping()
    restore_signals = install_signal_handlers(stopping, hard_timeout=shutdown_timeout)
    port = settings.probe_port if probe_port is None else probe_port(settings)
    probes = ProbeServer(
        settings.bind_address,
        port,
        registry=registry,
        prerendered_metrics=prerendered_metrics,
        health_aliases=health_aliases,
    )
    try:
        probes.start_in_thread()
    except OSError as exc:
        log.error(
            "cannot start probe server",
            extra={"address": f"{settings.bind_address}:{port}", "error": str(exc)},
        )
        restore_signals()
        return FORCED_EXIT_CODE
    context = ServiceContext(settings=settings, stopping=stopping, probes=probes)
    log.info("started", extra={"probe_port": probes.port, "once": settings.once, "dry_run": settings.dry_run})
    try:
        result = main(context)
        if inspect.isawaitable(result):
            result = asyncio.run(_await(result))
        exit_code = int(result or 0)
    except Exception:
        log.exception("service failed")
        exit_code = 1
    finally:
        probes.set_ready(False, "stopping")
        probes.stop_thread()
        restore_signals()
    log.info("stopped", extra={"exit_code": exit_code, "reason": stopping.reason or "main returned"})
    return exit_code


async def _await(awaitable: Awaitable[int | None]) -> int | None:
    return await awaitable
