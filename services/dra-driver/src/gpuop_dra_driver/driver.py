"""NodePrepareResources / NodeUnprepareResources, independent of the gRPC version that carries them.

Calls are serialized (as the Go kubelet-plugin helper does) and every claim is answered on its own:
one bad claim gets an error, the others in the same call are prepared. Prepare is idempotent (a
checkpointed claim is answered from the checkpoint, its spec rewritten if it went missing);
unprepare removes exactly the claim's spec file and checkpoint entry, and succeeds for a claim it
does not know (the kubelet retries unprepare until it succeeds).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuop_common.gpu.cdi import CdiSpecError, validate_spec, write_spec_file
from gpuop_common.kubejson import RESOURCECLAIMS, KubeJson, is_status
from kubernetes.client.exceptions import ApiException

from gpuop_dra_driver.cdi import cdi_id, claim_spec, spec_path
from gpuop_dra_driver.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from gpuop_dra_driver.claims import ClaimError, allocated_devices
from gpuop_dra_driver.devices import DraDevice

log = logging.getLogger(__name__)

ClaimReader = Callable[[str, str], Mapping[str, Any]]
"""(namespace, name) -> the ResourceClaim as JSON; raises ClaimError when it cannot be read."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True, slots=True)
class PrepareAnswer:
    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


def api_claim_reader(api: KubeJson) -> ClaimReader:
    def read(namespace: str, name: str) -> Mapping[str, Any]:
        try:
            return api.get(RESOURCECLAIMS, name, namespace)
        except ApiException as exc:
            if is_status(exc, 404):
                raise ClaimError(f"ResourceClaim {namespace}/{name} not found") from None
            raise ClaimError(
                f"cannot read ResourceClaim {namespace}/{name}: {exc.status} {exc.reason}"
            ) from None

    return read


class DraDriver:
    def __init__(
        self,
        *,
        driver: str,
        node: str,
        cdi_dir: Path,
        checkpoint: Checkpoint,
        read_claim: ClaimReader,
        devices: Callable[[], Mapping[str, DraDevice]],
    ) -> None:
        self.driver = driver
        self.node = node
        self.cdi_dir = cdi_dir
        self.checkpoint = checkpoint
        self._read_claim = read_claim
        self._devices = devices
        self._lock = threading.Lock()

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, PrepareAnswer]:
        with self._lock:
            return {claim.uid: self._prepare_one(claim) for claim in claims}

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        with self._lock:
            return {claim.uid: self._unprepare_one(claim) for claim in claims}

    def _prepare_one(self, claim: ClaimRef) -> PrepareAnswer:
        if not claim.uid or not claim.name or not claim.namespace:
            return PrepareAnswer(error=f"claim {claim} lacks a namespace, name or uid")
        done = self.checkpoint.get(claim.uid)
        if done is not None and spec_path(self.cdi_dir, claim.uid).is_file():
            return PrepareAnswer(done.devices)
        try:
            allocated = allocated_devices(
                self._read_claim(claim.namespace, claim.name),
                uid=claim.uid,
                driver=self.driver,
                pool=self.node,
                devices=self._devices(),
            )
            spec = claim_spec(claim.uid, self.driver, self.node, allocated)
            validate_spec(spec)
            write_spec_file(spec_path(self.cdi_dir, claim.uid), spec)
        except (ClaimError, CdiSpecError) as exc:
            log.warning("claim not prepared", extra={"claim": claim.uid, "error": str(exc)})
            return PrepareAnswer(error=str(exc))
        except OSError as exc:
            log.error("cannot write CDI spec", extra={"claim": claim.uid, "error": str(exc)})
            return PrepareAnswer(error=f"cannot write the CDI spec of claim {claim.uid}: {exc}")
        by_device: dict[str, list[str]] = {}
        for item in allocated:
            by_device.setdefault(item.device.name, []).append(item.request)
        devices = tuple(
            PreparedDevice(
                requests=tuple(dict.fromkeys(requests)),
                pool=self.node,
                device=name,
                cdi_ids=(cdi_id(claim.uid, name),),
            )
            for name, requests in by_device.items()
        )
        try:
            self.checkpoint.put(
                claim.uid, PreparedClaim(namespace=claim.namespace, name=claim.name, devices=devices)
            )
        except OSError as exc:
            # Without the checkpoint entry a later unprepare still finds the spec by uid.
            log.error("cannot write checkpoint", extra={"claim": claim.uid, "error": str(exc)})
        log.info("claim prepared", extra={"claim": claim.uid, "devices": [d.device for d in devices]})
        return PrepareAnswer(devices)

    def _unprepare_one(self, claim: ClaimRef) -> str:
        try:
            spec_path(self.cdi_dir, claim.uid).unlink(missing_ok=True)
            self.checkpoint.remove(claim.uid)
        except OSError as exc:
            log.error("claim not unprepared", extra={"claim": claim.uid, "error": str(exc)})
            return f"cannot remove the CDI spec or checkpoint entry of claim {claim.uid}: {exc}"
        log.info("claim unprepared", extra={"claim": claim.uid})
        return ""
