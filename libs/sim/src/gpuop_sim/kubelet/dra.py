"""The kubelet's DRA plugin handler: registered drivers, NodePrepare/NodeUnprepareResources calls,
the prepared claims, and the health streams of drivers that serve DRAResourceHealth."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from gpuop_common.kubelet import dra, drahealth, unix_channel
from gpuop_common.kubelet import pluginregistration as reg

from .drahealth import DeviceKey, DraDeviceHealth, HealthCache, HealthStream
from .state import DraError


@dataclass(frozen=True)
class DraClaim:
    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class PreparedDevice:
    pool_name: str
    device_name: str
    request_names: tuple[str, ...] = ()
    cdi_device_ids: tuple[str, ...] = ()
    share_id: str | None = None


@dataclass(frozen=True)
class PrepareResult:
    """The driver's answer for one claim; `error` non-empty means the claim failed."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True)
class PreparedClaim:
    """A claim the driver prepared (and nobody unprepared since)."""

    driver: str
    devices: tuple[PreparedDevice, ...]


@dataclass(eq=False)
class _DraInstance:
    endpoint: Path
    service: str
    channel: grpc.Channel = field(repr=False)
    health: HealthStream | None = field(default=None, repr=False)

    def close(self) -> None:
        if self.health is not None:
            self.health.stop()
        self.channel.close()


def dra_plugin_error(info: reg.PluginInfo) -> str | None:
    """Why the kubelet would refuse this DRA driver registration, or None."""
    if not info.name:
        return "DRA plugin name is empty"
    if not info.endpoint or not Path(info.endpoint).is_absolute():
        return f"DRA plugin {info.name} endpoint {info.endpoint!r} is not an absolute socket path"
    if dra.choose_service(list(info.supported_versions)) is None:
        return (
            f"none of the versions {list(info.supported_versions)} of DRA plugin {info.name} are supported; "
            f"kubelet supports {list(dra.KUBELET_SUPPORTED_SERVICES)}"
        )
    return None


class DraPlugins:
    """Registered DRA driver instances; the most recent instance of a driver serves its calls.

    Every instance that lists `v1alpha1.DRAResourceHealth` gets a health stream of its own (the
    kubelet keeps one per instance); `on_change` runs after each health message and stream end.
    """

    def __init__(
        self,
        rpc_timeout: float = dra.PREPARE_TIMEOUT_S,
        *,
        health_retry_s: float = drahealth.STREAM_RETRY_S,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._lock = threading.Lock()
        self._instances: dict[str, list[_DraInstance]] = {}
        self._prepared: dict[str, PreparedClaim] = {}
        self._rpc_timeout = rpc_timeout
        self._health_retry_s = health_retry_s
        self._on_change = on_change
        self.health = HealthCache()

    def register(self, info: reg.PluginInfo) -> None:
        service = dra.choose_service(list(info.supported_versions))
        assert service is not None, "validate with dra_plugin_error first"
        # Like the kubelet, connect lazily: the service socket may come up after registration.
        instance = _DraInstance(Path(info.endpoint), service, unix_channel(info.endpoint))
        if drahealth.SERVICE in info.supported_versions:
            instance.health = HealthStream(
                info.name, instance.channel, self.health, self._on_change, retry_s=self._health_retry_s
            )
        with self._lock:
            self._instances.setdefault(info.name, []).append(instance)

    def deregister(self, name: str, endpoint: str) -> None:
        with self._lock:
            instances = self._instances.get(name, [])
            gone = [i for i in instances if str(i.endpoint) == endpoint]
            self._instances[name] = [i for i in instances if i not in gone]
            if not self._instances[name]:
                del self._instances[name]
        for instance in gone:
            instance.close()

    def close(self) -> None:
        with self._lock:
            instances = [i for group in self._instances.values() for i in group]
            self._instances.clear()
        for instance in instances:
            instance.close()

    def drivers(self) -> dict[str, str]:
        """Driver name -> the DRA service version the kubelet talks to it with."""
        with self._lock:
            return {name: group[-1].service for name, group in self._instances.items()}

    def _instance(self, driver: str) -> _DraInstance:
        with self._lock:
            group = self._instances.get(driver)
            if not group:
                raise DraError(f"DRA driver {driver!r} is not registered with the kubelet")
            return group[-1]

    def prepare(self, driver: str, claims: Sequence[DraClaim]) -> dict[str, PrepareResult]:
        instance = self._instance(driver)
        try:
            if instance.service == dra.SERVICE_V1:
                v1_response = dra.v1_grpc.DRAPluginStub(instance.channel).NodePrepareResources(
                    dra.v1.NodePrepareResourcesRequest(claims=[_v1_claim(c) for c in claims]),
                    timeout=self._rpc_timeout,
                )
                answers = {
                    uid: PrepareResult(tuple(_v1_device(d) for d in r.devices), r.error)
                    for uid, r in v1_response.claims.items()
                }
            else:
                response = dra.DRAPluginStub(instance.channel).NodePrepareResources(
                    dra.NodePrepareResourcesRequest(claims=[_v1beta1_claim(c) for c in claims]),
                    timeout=self._rpc_timeout,
                )
                answers = {
                    uid: PrepareResult(tuple(_v1beta1_device(d) for d in r.devices), r.error)
                    for uid, r in response.claims.items()
                }
        except grpc.RpcError as exc:
            raise DraError(f"NodePrepareResources of {driver} failed: {exc}") from None
        missing = PrepareResult(error="claim missing from the DRA driver's response")
        results = {c.uid: answers.get(c.uid, missing) for c in claims}
        with self._lock:
            for uid, result in results.items():
                if not result.error:
                    self._prepared[uid] = PreparedClaim(driver, result.devices)
        return results

    def unprepare(self, driver: str, claims: Sequence[DraClaim]) -> dict[str, str]:
        """Claim UID -> error text ("" when unprepared)."""
        instance = self._instance(driver)
        try:
            if instance.service == dra.SERVICE_V1:
                v1_response = dra.v1_grpc.DRAPluginStub(instance.channel).NodeUnprepareResources(
                    dra.v1.NodeUnprepareResourcesRequest(claims=[_v1_claim(c) for c in claims]),
                    timeout=self._rpc_timeout,
                )
                errors = {uid: r.error for uid, r in v1_response.claims.items()}
            else:
                response = dra.DRAPluginStub(instance.channel).NodeUnprepareResources(
                    dra.NodeUnprepareResourcesRequest(claims=[_v1beta1_claim(c) for c in claims]),
                    timeout=self._rpc_timeout,
                )
                errors = {uid: r.error for uid, r in response.claims.items()}
        except grpc.RpcError as exc:
            raise DraError(f"NodeUnprepareResources of {driver} failed: {exc}") from None
        results = {c.uid: errors.get(c.uid, "claim missing from the DRA driver's response") for c in claims}
        with self._lock:
            for uid, error in results.items():
                if not error:
                    self._prepared.pop(uid, None)
        return results

    def prepared_claims(self) -> dict[str, PreparedClaim]:
        """Claim UID -> what its driver prepared, for claims not unprepared since."""
        with self._lock:
            return dict(self._prepared)

    def device_health(self, driver: str) -> dict[DeviceKey, DraDeviceHealth]:
        return self.health.devices(driver)

    def claim_health(self, uid: str) -> dict[DeviceKey, DraDeviceHealth]:
        """The health of a prepared claim's devices, as the kubelet reports it in the pod's status."""
        with self._lock:
            claim = self._prepared.get(uid)
        if claim is None:
            raise DraError(f"claim {uid} is not prepared")
        return {
            (d.pool_name, d.device_name): self.health.device(claim.driver, d.pool_name, d.device_name)
            for d in claim.devices
        }


def _v1_claim(claim: DraClaim) -> dra.v1.Claim:
    return dra.v1.Claim(namespace=claim.namespace, uid=claim.uid, name=claim.name)


def _v1beta1_claim(claim: DraClaim) -> dra.Claim:
    return dra.Claim(namespace=claim.namespace, uid=claim.uid, name=claim.name)


def _v1_device(device: dra.v1.Device) -> PreparedDevice:
    return PreparedDevice(
        pool_name=device.pool_name,
        device_name=device.device_name,
        request_names=tuple(device.request_names),
        cdi_device_ids=tuple(device.cdi_device_ids),
        share_id=device.share_id if device.HasField("share_id") else None,
    )


def _v1beta1_device(device: dra.Device) -> PreparedDevice:
    return PreparedDevice(
        pool_name=device.pool_name,
        device_name=device.device_name,
        request_names=tuple(device.request_names),
        cdi_device_ids=tuple(device.cdi_device_ids),
    )
