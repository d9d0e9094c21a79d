"""What starts a run (pure): the node's request annotation, and GPUs turning unhealthy."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuop_common.gpu import GpuDevice, GpuHealth

_REQUEST = re.compile(
    r"^(?P<recipe>[A-Za-z0-9][A-Za-z0-9_./-]{0,127})(?::(?P<id>[A-Za-z0-9][A-Za-z0-9_.-]{0,62}))?$"
)


@dataclass(frozen=True, slots=True)
class TestRequest:
    __test__ = False

    recipe: str
    request_id: str | None


def parse_request(value: str) -> TestRequest:
    """`<recipe>[:<request-id>]` -> TestRequest; anything else raises ValueError saying the format."""
    match = _REQUEST.match(value.strip())
    if match is None:
        raise ValueError(f"test request {value!r} is not <recipe>[:<request-id>]")
    return TestRequest(match["recipe"], match["id"])


class UnhealthyTransitions:
    """Remembers which GPUs are unhealthy so each healthy -> unhealthy change triggers once.

    A GPU that recovers is forgotten, so its next failure triggers again.
    """

    def __init__(self) -> None:
        self._unhealthy: set[str] = set()

    def update(self, health: Iterable[GpuHealth]) -> list[str]:
        """The GPU ids that became unhealthy since the last update, in the order given."""
        now = [h.gpu_id for h in health if not h.healthy]
        new = [gpu for gpu in now if gpu not in self._unhealthy]
        self._unhealthy = set(now)
        return new


def held_gpus(
    gpu_ids: Iterable[str], devices: Sequence[GpuDevice], holders: Mapping[str, Sequence[object]]
) -> dict[str, list[str]]:
    """GPU id -> the holders (pod/container) of any part of it, for the GPUs in `gpu_ids` that are held.

    `holders` maps a device id from the kubelet's pod-resources API to who holds it. A partitioned
    GPU is held when any partition is: a vendor test exercises the whole GPU.
    """
    by_id = {d.id: d for d in devices}
    held: dict[str, list[str]] = {}
    for gpu_id in gpu_ids:
        device = by_id.get(gpu_id)
        if device is None:
            continue  # vanished GPU: nothing can hold it, the test reports it missing
        found = sorted({str(h) for device_id in device.allocation_ids for h in holders.get(device_id, ())})
        if found:
            held[gpu_id] = found
    return held
