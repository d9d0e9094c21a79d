"""The latest device health, handed from the driver's loop to the kubelet's health streams.

The loop calls `update()` after every pass; each open `NodeWatchResources` stream iterates
`watch()`: the current report at once, then every changed one. Without a change the same report
goes out again once `timeout_s / 3` has passed, but only if a pass ran since the last send: the
kubelet shows a device Unknown when it hears nothing about it for `timeout_s`, and that is right
when our health loop has stalled, not when the GPUs are merely quiet.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from gpuop_dra_driver.health import DeviceHealthState

# health_check_timeout_seconds = this many health polls: 30 s at the default 1 s poll, the kubelet's
# own default. Passes that run long (a re-enumeration after a change, a slow sysfs or NVML read)
# must not turn every device Unknown in the pods' status; a health loop that really stopped still
# shows there, as Unknown, 30 polls later.
TIMEOUT_POLLS = 30


def health_timeout_s(poll_interval: float) -> int:
    """The `health_check_timeout_seconds` we report for a loop that polls every `poll_interval` s."""
    return max(1, math.ceil(poll_interval * TIMEOUT_POLLS))


@dataclass(frozen=True, slots=True)
class DeviceReport:
    state: DeviceHealthState
    since: int  # unix seconds of the last change of this device's health or reasons


@dataclass(frozen=True, slots=True)
class HealthReport:
    """One stream message: every known device, sorted by name. `version` counts changes."""

    version: int
    devices: tuple[DeviceReport, ...]


class HealthFeed:
    def __init__(self, timeout_s: int, *, clock: Callable[[], float] = time.time) -> None:
        self.timeout_s = timeout_s
        self.resend_after = timeout_s / 3
        self._clock = clock
        self._cond = threading.Condition()
        self._report = HealthReport(0, ())
        self._passes = 0

    def update(self, states: Sequence[DeviceHealthState]) -> bool:
        """One pass's health, changed or not; True when it differs from the previous pass."""
        with self._cond:
            self._passes += 1
            before = {d.state.device: d for d in self._report.devices}
            if [d.state for d in self._report.devices] == list(states):
                self._cond.notify_all()  # a pass ran: streams due for a resend may send it now
                return False
            now = int(self._clock())
            devices = []
            for state in states:
                old = before.get(state.device)
                devices.append(old if old is not None and old.state == state else DeviceReport(state, now))
            self._report = HealthReport(self._report.version + 1, tuple(devices))
            self._cond.notify_all()
            return True

    def current(self) -> HealthReport:
        with self._cond:
            return self._report

    def wake(self) -> None:
        """Make every waiting stream look at its client again (an RPC ended)."""
        with self._cond:
            self._cond.notify_all()

    def watch(self, active: Callable[[], bool]) -> Iterator[HealthReport]:
        """The current report, then every change and the resends, while `active()` holds.

        Whoever ends the stream must call `wake()` afterwards (gRPC's RPC-termination callback
        does); without one a waiting stream still notices within `resend_after` seconds.
        """
        with self._cond:
            report, passes = self._report, self._passes
        while active():
            sent_at = time.monotonic()
            yield report
            with self._cond:
                while not self._due(active, report, passes, sent_at):
                    self._cond.wait(self.resend_after)
                report, passes = self._report, self._passes

    def _due(self, active: Callable[[], bool], sent: HealthReport, passes: int, sent_at: float) -> bool:
        """Time to send (or to end): the client left, health changed, or a resend is due."""
        if not active() or self._report.version != sent.version:
            return True
        return self._passes != passes and time.monotonic() - sent_at >= self.resend_after
