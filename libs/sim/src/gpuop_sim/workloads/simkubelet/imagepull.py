"""The kubelet's image pull failures for one pod (pure): what it reports and when it pulls again.

A kubelet never fails a pod because an image cannot be pulled. The pod stays `Pending`; the
container's waiting reason is `ErrImagePull` (message `Failed to pull image "<image>": <error>`)
right after a failed pull, then `ImagePullBackOff` (`Back-off pulling image "<image>"`) until the
back-off for that pod and image expires and it pulls again. The back-off starts at 10 s and doubles
up to 300 s (kubelet `backOffPeriod` / `MaxImageBackOff`). A reference that does not parse is
`InvalidImageName`: refused before any pull, so no back-off, retried at every sync.

The Events, as `kubectl describe pod` shows them for one failed pull and one back-off sync:
    Warning  Failed   Failed to pull image "<image>": <error>
    Warning  Failed   Error: ErrImagePull
    Normal   BackOff  Back-off pulling image "<image>"
    Warning  Failed   Error: ImagePullBackOff
and for a malformed reference:
    Warning  InspectFailed  Failed to apply default image tag "<image>": couldn't parse image name ...
    Warning  Failed         Error: InvalidImageName
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

INITIAL_BACKOFF_S = 10.0  # kubelet backOffPeriod
MAX_BACKOFF_S = 300.0  # kubelet MaxImageBackOff

# distribution/reference's grammar: [domain[:port]/]path-component(/path-component)*[:tag][@digest],
# path components lowercase.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_DOMAIN = rf"(?:{_LABEL}(?:\.{_LABEL})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_REFERENCE = re.compile(
    rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
    r"(?::[\w][\w.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)


def invalid_reference(image: str) -> str:
    """The kubelet's `InvalidImageName` message for a reference that does not parse, else ""."""
    if _REFERENCE.match(image) and len(image) <= 255:
        return ""
    return (
        f'Failed to apply default image tag "{image}": '
        f'couldn\'t parse image name "{image}": invalid reference format'
    )


def pull_backoff(failures: int) -> float:
    """Seconds before pulling again after `failures` failed pulls in a row (10 s doubling, 300 s cap)."""
    return float(min(INITIAL_BACKOFF_S * 2 ** max(failures - 1, 0), MAX_BACKOFF_S))


def backoff_message(image: str) -> str:
    return f'Back-off pulling image "{image}"'


@dataclass
class PullBackOff:
    """Failed pulls of one pod, by image: whether a pull may be tried now."""

    failures: dict[str, int] = field(default_factory=dict)
    retry_at: dict[str, float] = field(default_factory=dict)

    def failed(self, image: str, now: float) -> float:
        """A pull of `image` failed at `now`: seconds until the next may be tried."""
        count = self.failures.get(image, 0) + 1
        self.failures[image] = count
        delay = pull_backoff(count)
        self.retry_at[image] = now + delay
        return delay

    def backing_off(self, images: list[str], now: float) -> str:
        """The first of `images` whose back-off has not expired at `now`, else ""."""
        return next((i for i in images if now < self.retry_at.get(i, 0.0)), "")
