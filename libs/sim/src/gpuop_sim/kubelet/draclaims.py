"""Which pods use each prepared ResourceClaim, as the kubelet's DRA manager keeps it.

One claim may be used by several pods (its `status.reservedFor` lists each; the scheduler reserves
it per pod). The kubelet prepares a claim once: a pod whose claim is already prepared for another
pod joins it without a NodePrepareResources call, and NodeUnprepareResources is called only when
the last pod using the claim is gone (kubelet `pkg/kubelet/cm/dra`: `addPodReference`,
`isPrepared`, `hasPodReference`). A pod the claim is not reserved for is refused before the driver
is asked, with the kubelet's message.
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Mapping, Sequence

from .dra import DraClaim


def not_reserved_error(pod_uid: str, claim: DraClaim) -> str:
    return f"pod {pod_uid} is not allowed to use resource claim {claim.namespace}/{claim.name}"


class ClaimUsers:
    """Claim uid -> the uids of the pods using it (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, set[str]] = {}

    def to_prepare(
        self,
        pod_uid: str,
        claims: Sequence[DraClaim],
        reserved_for: Mapping[str, Collection[str]] | None = None,
    ) -> tuple[list[DraClaim], dict[str, str]]:
        """The claims the driver must prepare for this pod (not yet prepared for any pod), and the
        refused ones (claim uid -> error). `reserved_for`: claim uid -> pod uids of its
        `status.reservedFor`; None skips the check."""
        refused = {
            c.uid: not_reserved_error(pod_uid, c)
            for c in claims
            if reserved_for is not None and pod_uid not in reserved_for.get(c.uid, ())
        }
        with self._lock:
            new = [c for c in claims if c.uid not in refused and not self._pods.get(c.uid)]
        return new, refused

    def add(self, pod_uid: str, claim_uids: Collection[str]) -> None:
        with self._lock:
            for uid in claim_uids:
                self._pods.setdefault(uid, set()).add(pod_uid)

    def leave(self, pod_uid: str, claims: Sequence[DraClaim]) -> list[DraClaim]:
        """Drop the pod from its claims; the claims no pod uses any more (to unprepare)."""
        with self._lock:
            last = []
            for claim in claims:
                users = self._pods.get(claim.uid, set())
                users.discard(pod_uid)
                if not users:
                    self._pods.pop(claim.uid, None)
                    last.append(claim)
            return last

    def users(self, claim_uid: str) -> frozenset[str]:
        with self._lock:
            return frozenset(self._pods.get(claim_uid, ()))
