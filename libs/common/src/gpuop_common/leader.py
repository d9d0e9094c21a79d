"""Leader election on a coordination.k8s.io/v1 Lease.

Why not `kubernetes.leaderelection`: it judges expiry from the holder's `renewTime` against the local
clock (so clock skew between nodes can make two leaders), has no release on shutdown and swallows
API errors. This elector follows client-go's rules instead:

- every write is a `replace` carrying the `resourceVersion` that was read, so of two candidates
  racing for the same Lease exactly one write succeeds; the other gets 409 and stays a follower;
- a Lease held by someone else counts as expired only after `lease_duration` has passed on *our*
  monotonic clock since we last saw its record change (never comparing clocks across machines);
- the leader gives up leading when it could not renew for `renew_deadline` (< `lease_duration`), so
  it has stopped before anyone else may take over;
- on shutdown the leader releases the Lease (empty holder) so a successor starts at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import urllib3.exceptions
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop_common.shutdown import Stopping

log = logging.getLogger(__name__)

_API_ERRORS = (ApiException, urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)


@dataclass(frozen=True)
class LeaseConfig:
    name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("identity must not be empty")
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "need 0 < retry_period < renew_deadline < lease_duration, got "
                f"{self.retry_period}, {self.renew_deadline}, {self.lease_duration}"
            )


def _now() -> datetime:
    return datetime.now(UTC)


class LeaderElector:
    """Campaign for a Lease; `on_started_leading`/`on_stopped_leading` run on the elector's thread.

    Callbacks should return quickly (start or signal the real work); `is_leader` can be polled.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        lease: LeaseConfig,
        *,
        on_started_leading: Callable[[], None] = lambda: None,
        on_stopped_leading: Callable[[], None] = lambda: None,
    ) -> None:
        self._api = client.CoordinationV1Api(api_client)
        self.lease = lease
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._leading = False
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0  # monotonic time it was first seen
        self._last_renewal = 0.0

    @property
    def is_leader(self) -> bool:
        return self._leading

    # -- one step ------------------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the Lease afterwards. Never raises for API trouble."""
        try:
            return self._try_acquire_or_renew()
        except _API_ERRORS as exc:
            status = getattr(exc, "status", None)
            if status == 409:
                log.debug("lost the race for the lease", extra={"lease": self.lease.name})
            else:
                log.warning(
                    "lease update failed",
                    extra={"lease": self.lease.name, "status": status, "error": type(exc).__name__},
                )
            return False

    def _try_acquire_or_renew(self) -> bool:
        now_mono = time.monotonic()
        try:
            current = self._api.read_namespaced_lease(self.lease.name, self.lease.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self._api.create_namespaced_lease(self.lease.namespace, self._new_lease())
            self._observe(self.lease.identity, "", now_mono)
            return True

        spec = current.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        renew_time = spec.renew_time.isoformat() if spec.renew_time else ""
        self._observe(holder, renew_time, now_mono)
        duration = float(spec.lease_duration_seconds or self.lease.lease_duration)
        held_by_other = bool(holder) and holder != self.lease.identity
        if held_by_other and now_mono < self._observed_at + duration:
            return False

        now = _now()
        transitions = spec.lease_transitions or 0
        acquired = spec.acquire_time
        if holder != self.lease.identity:  # a new holder, also after a release (as client-go counts)
            transitions += 1
            acquired = now
        current.spec = client.V1LeaseSpec(
            holder_identity=self.lease.identity,
            lease_duration_seconds=round(self.lease.lease_duration) or 1,
            acquire_time=acquired or now,
            renew_time=now,
            lease_transitions=transitions,
        )
        # replace with the resourceVersion we read: a concurrent writer makes this a 409.
        self._api.replace_namespaced_lease(self.lease.name, self.lease.namespace, current)
        return True

    def _new_lease(self) -> client.V1Lease:
        now = _now()
        return client.V1Lease(
            metadata=client.V1ObjectMeta(name=self.lease.name, namespace=self.lease.namespace),
            spec=client.V1LeaseSpec(
                holder_identity=self.lease.identity,
                lease_duration_seconds=round(self.lease.lease_duration) or 1,
                acquire_time=now,
                renew_time=now,
                lease_transitions=0,
            ),
        )

    def _observe(self, holder: str, renew_time: str, now_mono: float) -> None:
        if (holder, renew_time) != self._observed:
            self._observed = (holder, renew_time)
            self._observed_at = now_mono

    def release(self) -> bool:
        """Give the Lease up if we hold it, so a successor need not wait for expiry."""
        try:
            current = self._api.read_namespaced_lease(self.lease.name, self.lease.namespace)
            spec = current.spec
            if spec is None or spec.holder_identity != self.lease.identity:
                return False
            spec.holder_identity = None
            spec.lease_duration_seconds = 1
            spec.renew_time = _now()
            self._api.replace_namespaced_lease(self.lease.name, self.lease.namespace, current)
        except _API_ERRORS as exc:
            log.warning("could not release lease", extra={"lease": self.lease.name, "error": str(exc)})
            return False
        log.info("released lease", extra={"lease": self.lease.name})
        return True

    # -- the loop ------------------------------------------------------------------------------------

    def _start_leading(self, renewed_at: float) -> None:
        self._leading = True
        self._last_renewal = renewed_at
        log.info("started leading", extra={"lease": self.lease.name, "identity": self.lease.identity})
        self._on_started()

    def _stop_leading(self, why: str) -> None:
        if not self._leading:
            return
        self._leading = False
        log.info("stopped leading", extra={"lease": self.lease.name, "why": why})
        self._on_stopped()

    def step(self) -> None:
        """One campaign/renew round; `run` calls it every `retry_period`."""
        # The renewal counts from before the request: the write may land at any point during it.
        attempt_started = time.monotonic()
        ok = self.try_acquire_or_renew()
        if not self._leading:
            if ok:
                self._start_leading(attempt_started)
            return
        if ok:
            self._last_renewal = attempt_started
        elif time.monotonic() - self._last_renewal >= self.lease.renew_deadline:
            self._stop_leading("could not renew within the renew deadline")
        elif self._observed is not None and self._observed[0] not in ("", self.lease.identity):
            self._stop_leading(f"lease taken by {self._observed[0]}")

    def run(self, stopping: Stopping) -> None:
        """Campaign until `stopping`; then release the Lease if held."""
        try:
            while not stopping.is_set():
                self.step()
                if stopping.wait(self.lease.retry_period):
                    break
        finally:
            if self._leading:
                self.release()
                self._stop_leading("shutting down")

    def start_in_thread(self, stopping: Stopping) -> threading.Thread:
        thread = threading.Thread(
            target=self.run, args=(stopping,), name=f"gpuop-leader-{self.lease.name}", daemon=True
        )
        thread.start()
        return thread
