"""Pure kubelet probe semantics: when to probe, when a container is started/ready, when it is killed.

A real kubelet runs one worker per container and probe, every `periodSeconds`, from container start
plus `initialDelaySeconds`; a `startupProbe` gates liveness and readiness until it succeeds once;
`failureThreshold` consecutive failures of a startup or liveness probe kill the container, of a
readiness probe mark it unready; `successThreshold` consecutive successes make it ready again.

The simulator may only be faster where the outcome cannot change, so:
- startup and readiness probes run up to every `FAST_INTERVAL_S` (a success only brings Started or
  Ready sooner), but a failure counts toward `failureThreshold` at most once per real period, and the
  first counted failure comes no sooner than one period after the probe's initial delay;
- liveness probes run at their real period.
So the earliest a startup or liveness probe can kill is `initialDelaySeconds + periodSeconds x
failureThreshold` after the probe may first run (container start, or startup success for liveness),
the budget the Kubernetes docs give; see `ContainerProbes.earliest_kill()`.

Every function takes `now` (monotonic seconds) explicitly; nothing here sleeps or does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

# How often startup and readiness probes may run at most, whatever their period (>= this).
FAST_INTERVAL_S = 0.5

# The API server's defaults for an unset (or zero) field.
DEFAULT_PERIOD_S = 10
DEFAULT_TIMEOUT_S = 1
DEFAULT_FAILURE_THRESHOLD = 3
DEFAULT_SUCCESS_THRESHOLD = 1


class ProbeKind(StrEnum):
    STARTUP = "startup"
    LIVENESS = "liveness"
    READINESS = "readiness"

    @property
    def field(self) -> str:
        """The container field that holds this probe: `startupProbe`, ..."""
        return f"{self.value}Probe"

    @property
    def label(self) -> str:
        """As kubelet messages spell it: `Liveness probe failed: ...`."""
        return self.value.capitalize()


class ProbeSpecError(ValueError):
    """A probe field the API server would refuse; the message names the field."""


@dataclass(frozen=True)
class ProbeTiming:
    """The timing fields of one probe, defaults filled in as the API server does."""

    initial_delay: float = 0.0
    period: float = float(DEFAULT_PERIOD_S)
    timeout: float = float(DEFAULT_TIMEOUT_S)
    failure_threshold: int = DEFAULT_FAILURE_THRESHOLD
    success_threshold: int = DEFAULT_SUCCESS_THRESHOLD


def _int_field(probe: Mapping[str, Any], name: str, default: int, minimum: int, where: str) -> int:
    value = probe.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProbeSpecError(f"{where}.{name}: must be an integer, not {value!r}")
    if value < minimum:
        raise ProbeSpecError(f"{where}.{name}: must be at least {minimum}, not {value}")
    # The API server defaults a zero period/threshold/timeout; only initialDelaySeconds may be 0.
    return value or default


def probe_timing(kind: ProbeKind, probe: Mapping[str, Any], where: str) -> ProbeTiming:
    """The ProbeTiming of `probe` (a container's `<kind>Probe`); `where` prefixes field names in errors.

    Liveness and startup probes must have successThreshold 1, as the API server requires.
    """
    success = _int_field(probe, "successThreshold", DEFAULT_SUCCESS_THRESHOLD, 0, where)
    if kind is not ProbeKind.READINESS and success != 1:
        raise ProbeSpecError(f"{where}.successThreshold: must be 1 for a {kind.value} probe, not {success}")
    return ProbeTiming(
        initial_delay=float(_int_field(probe, "initialDelaySeconds", 0, 0, where)),
        period=float(_int_field(probe, "periodSeconds", DEFAULT_PERIOD_S, 0, where)),
        timeout=float(_int_field(probe, "timeoutSeconds", DEFAULT_TIMEOUT_S, 0, where)),
        failure_threshold=_int_field(probe, "failureThreshold", DEFAULT_FAILURE_THRESHOLD, 0, where),
        success_threshold=success,
    )


def container_probe_timings(container: Mapping[str, Any], where: str) -> dict[ProbeKind, ProbeTiming]:
    """Every probe a container declares, validated; `where` is e.g. `spec.containers[agent]`."""
    timings = {}
    for kind in ProbeKind:
        probe = container.get(kind.field)
        if probe is None:
            continue
        if not isinstance(probe, Mapping):
            raise ProbeSpecError(f"{where}.{kind.field}: must be an object, not {probe!r}")
        timings[kind] = probe_timing(kind, probe, f"{where}.{kind.field}")
    return timings


@dataclass
class ProbeState:
    """One probe of one running container. `failures`/`successes` are consecutive counts."""

    kind: ProbeKind
    timing: ProbeTiming
    not_before: float  # container start + initialDelaySeconds (later, for liveness, if startup gates it)
    next_run: float = 0.0
    next_count: float = 0.0  # the earliest time a failure may count toward failureThreshold
    failures: int = 0
    successes: int = 0
    last_message: str = ""

    def __post_init__(self) -> None:
        self.schedule_from(self.not_before)

    def schedule_from(self, start: float) -> None:
        """(Re)start the probe's clock: it may run from `start`, count a failure one period later."""
        self.not_before = max(self.not_before, start)
        self.next_run = self.not_before
        self.next_count = self.not_before + self.timing.period

    @property
    def interval(self) -> float:
        if self.kind is ProbeKind.LIVENESS:
            return self.timing.period
        return min(self.timing.period, FAST_INTERVAL_S)

    def due(self, now: float) -> bool:
        return now >= self.next_run

    def record(self, ok: bool, message: str, now: float) -> bool:
        """Take one probe result at `now`; True when it counted as a failure."""
        self.last_message = message
        self.next_run = now + self.interval
        if ok:
            self.successes += 1
            self.failures = 0
            return False
        self.successes = 0
        if now < self.next_count:
            return False  # sooner than a real kubelet would have probed again: not counted
        self.failures += 1
        self.next_count = now + self.timing.period
        return True

    @property
    def failed(self) -> bool:
        return self.failures >= self.timing.failure_threshold

    @property
    def succeeded(self) -> bool:
        return self.successes >= self.timing.success_threshold

    def earliest_failure(self) -> float:
        """The soonest this probe can reach failureThreshold from its current state."""
        left = max(self.timing.failure_threshold - self.failures, 1)
        return self.next_count + (left - 1) * self.timing.period


@dataclass(frozen=True)
class ProbeVerdict:
    """What one probe result means for the container."""

    counted_failure: bool = False  # post an `Unhealthy` event
    kill: bool = False  # startup or liveness reached failureThreshold: kill and restart per policy


@dataclass
class ContainerProbes:
    """All probes of one container run (a restart builds a new one: every counter starts over)."""

    started_at: float
    probes: dict[ProbeKind, ProbeState] = field(default_factory=dict)
    started: bool = False
    ready: bool = False

    @classmethod
    def begin(cls, timings: Mapping[ProbeKind, ProbeTiming], now: float) -> ContainerProbes:
        """The probes of a container that started at `now`."""
        probes = {
            kind: ProbeState(kind, timing, not_before=now + timing.initial_delay)
            for kind, timing in timings.items()
        }
        state = cls(started_at=now, probes=probes)
        state.started = ProbeKind.STARTUP not in probes
        state.ready = state.started and ProbeKind.READINESS not in probes
        return state

    def due(self, now: float) -> list[ProbeKind]:
        """The probes to run now, startup alone until it has succeeded."""
        if not self.started:
            return [ProbeKind.STARTUP] if self.probes[ProbeKind.STARTUP].due(now) else []
        return [k for k, p in self.probes.items() if k is not ProbeKind.STARTUP and p.due(now)]

    def record(self, kind: ProbeKind, ok: bool, message: str, now: float) -> ProbeVerdict:
        probe = self.probes[kind]
        counted = probe.record(ok, message, now)
        if kind is ProbeKind.STARTUP:
            if probe.succeeded and not self.started:
                self._startup_succeeded(now)
            return ProbeVerdict(counted_failure=counted, kill=probe.failed)
        if kind is ProbeKind.LIVENESS:
            return ProbeVerdict(counted_failure=counted, kill=probe.failed)
        if probe.succeeded:
            self.ready = True
        elif probe.failed:
            self.ready = False
        return ProbeVerdict(counted_failure=counted)

    def _startup_succeeded(self, now: float) -> None:
        self.started = True
        for kind, probe in self.probes.items():
            if kind is not ProbeKind.STARTUP:
                probe.schedule_from(now)
        self.ready = ProbeKind.READINESS not in self.probes

    def earliest_kill(self) -> float | None:
        """The soonest a probe can kill this container from here, None when no probe can."""
        gate = ProbeKind.LIVENESS if self.started else ProbeKind.STARTUP
        probe = self.probes.get(gate)
        return None if probe is None else probe.earliest_failure()

    def last_message(self, kind: ProbeKind) -> str:
        probe = self.probes.get(kind)
        return probe.last_message if probe else ""
