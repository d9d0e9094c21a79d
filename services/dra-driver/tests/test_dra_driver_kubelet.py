"""The DRA driver against the kubelet emulator over real unix sockets and the simulated API server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.gpu.cdi import validate_spec
from gpuop_common.kubelet import dial_unix, dra, drahealth
from gpuop_common.kubelet import pluginregistration as reg
from gpuop_dra_driver import DRIVER_NAME
from gpuop_dra_driver.cdi import CDI_KIND, spec_path
from gpuop_sim.kubelet import DraClaim, KubeletEmulator
from gpuop_sim.nodes import NodeRootInfo
from gpuop_sim.nodes.faults import vanish_gpu
from gpuop_sim.waiting import wait_until

NODE = "gpu-node-1"  # conftest's node
MakeRoot = Callable[..., NodeRootInfo]
StartDriver = Callable[..., Any]  # conftest.run_driver -> DriverHandle
Claims = Any  # conftest.ClaimFactory
Handle = Any


def result(
    device: str, *, request: str = "gpu", pool: str = NODE, driver: str = DRIVER_NAME
) -> dict[str, str]:
    """One `status.allocation.devices.results` entry."""
    return {"request": request, "driver": driver, "pool": pool, "device": device}


def gpu_names(handle: Handle) -> list[str]:
    """Whole-GPU device names, in PCI order."""
    return sorted(n for n, d in handle.service.inventory.devices().items() if d.type == "gpu")


def registered(kubelet: KubeletEmulator) -> None:
    kubelet.wait_for(lambda: kubelet.dra_drivers() == {DRIVER_NAME: dra.SERVICE_V1}, timeout=15)


def spec_of(handle: Handle, uid: str) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(spec_path(handle.cdi_dir, uid).read_text())
    validate_spec(spec)
    return spec


def env_of(spec: dict[str, Any]) -> dict[str, str]:
    return dict(entry.split("=", 1) for entry in spec["containerEdits"]["env"])


def node_paths(spec: dict[str, Any]) -> list[str]:
    return [n["path"] for d in spec["devices"] for n in d["containerEdits"]["deviceNodes"]]


def test_registration_handshake(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator
) -> None:
    handle = run_driver(gpu_node_root("amd-single"), publish=False)
    registered(kubelet_emulator)
    # The watcher records the plugin, then sends NotifyRegistrationStatus, both after the DRA
    # handler took it (what registered() waits for): wait for the notification, do not race it.
    kubelet_emulator.wait_for(lambda: handle.sockets.registered, timeout=15)
    (plugin,) = [p for p in kubelet_emulator.registered_plugins() if p.type == reg.DRA_PLUGIN]
    assert plugin.name == DRIVER_NAME
    assert list(plugin.supported_versions) == [dra.SERVICE_V1, dra.SERVICE_V1BETA1, drahealth.SERVICE]
    assert Path(plugin.endpoint) == handle.sockets.service_socket
    assert plugin.socket == handle.sockets.registration_socket
    assert handle.sockets.registration_socket.name == f"{DRIVER_NAME}-reg.sock"


def test_prepare_and_unprepare_a_whole_amd_gpu(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator, claims: Claims
) -> None:
    info = gpu_node_root("amd-mi210x8")
    handle = run_driver(info, publish=False)
    registered(kubelet_emulator)
    name = gpu_names(handle)[3]
    claim = claims.make([result(name)])
    answer = kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid]
    assert answer.error == ""
    (device,) = answer.devices
    assert (device.pool_name, device.device_name, device.request_names) == (NODE, name, ("gpu",))
    assert device.cdi_device_ids == (f"{CDI_KIND}={claim.uid}-{name}",)
    spec = spec_of(handle, claim.uid)
    paths = node_paths(spec)
    assert paths[0] == "/dev/kfd" and any(p.startswith("/dev/dri/renderD") for p in paths)
    assert all((info.root / p.lstrip("/")).exists() for p in paths), paths
    env = env_of(spec)
    assert (
        env["ROCR_VISIBLE_DEVICES"].startswith("GPU-")
        and env["HIP_VISIBLE_DEVICES"] == env["ROCR_VISIBLE_DEVICES"]
    )
    assert env["DRA_RESOURCE_DRIVER_NAME"] == DRIVER_NAME

    assert kubelet_emulator.unprepare(DRIVER_NAME, [claim]) == {claim.uid: ""}
    assert not spec_path(handle.cdi_dir, claim.uid).exists()
    assert handle.driver.checkpoint.get(claim.uid) is None
    # Unprepare again (the kubelet retries until it hears success): still fine, nothing to remove.
    assert kubelet_emulator.unprepare(DRIVER_NAME, [claim]) == {claim.uid: ""}


def test_prepare_cpx_partitions_on_the_mi300x_capture(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator, claims: Claims
) -> None:
    handle = run_driver(gpu_node_root("amd-mi300x-cpx"), publish=False)
    registered(kubelet_emulator)
    devices = handle.service.inventory.devices()
    assert len(devices) == 63 and {d.type for d in devices.values()} == {"partition"}
    gpus = sorted({n.split("-part-")[0] for n in devices})
    picks = [f"{gpus[0]}-part-1", f"{gpus[1]}-part-2"]
    claim = claims.make([result(n) for n in picks])
    answer = kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid]
    assert answer.error == ""
    assert [d.device_name for d in answer.devices] == picks
    spec = spec_of(handle, claim.uid)
    renders = [p for p in node_paths(spec) if "renderD" in p]
    expected = [next(p for p in devices[name].device_nodes if "renderD" in p) for name in picks]
    assert renders == expected and len(set(renders)) == 2
    # Partitions of two GPUs: ROCR names both parents.
    assert len(env_of(spec)["ROCR_VISIBLE_DEVICES"].split(",")) == 2


def test_prepare_nvidia_gpu_and_mig_devices(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator, claims: Claims
) -> None:
    handle = run_driver(gpu_node_root("nvidia-h100x8-mig"), publish=False)
    registered(kubelet_emulator)
    devices = handle.service.inventory.devices()
    migs = sorted(n for n, d in devices.items() if d.type == "partition")
    assert migs and all("-mig-" in n for n in migs)
    whole = sorted(n for n, d in devices.items() if d.type == "gpu")
    picks = [migs[0], *whole[:1]]
    claim = claims.make([result(n) for n in picks])
    answer = kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid]
    assert answer.error == ""
    spec = spec_of(handle, claim.uid)
    paths = node_paths(spec)
    assert "/dev/nvidiactl" in paths and "/dev/nvidia-uvm" in paths
    assert any(p.startswith("/dev/nvidia-caps/") for p in paths)  # the MIG device's caps
    visible = env_of(spec)["NVIDIA_VISIBLE_DEVICES"].split(",")
    assert visible[0] == devices[migs[0]].uid and visible[0].startswith("MIG-")


def test_prepare_is_idempotent_and_survives_a_restart(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator, claims: Claims
) -> None:
    info = gpu_node_root("nvidia-h100x8")
    handle = run_driver(info, publish=False)
    registered(kubelet_emulator)
    claim = claims.make([result(gpu_names(handle)[0])])
    first = kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid]
    again = kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid]
    assert first == again and first.error == ""
    written = spec_path(handle.cdi_dir, claim.uid).stat().st_mtime_ns

    handle.stop()
    kubelet_emulator.wait_for(lambda: kubelet_emulator.dra_drivers() == {}, timeout=15)
    restarted = run_driver(info, publish=False)
    registered(kubelet_emulator)
    # The checkpoint answers the repeated prepare: same devices, the spec is not rewritten.
    assert restarted.driver.checkpoint.get(claim.uid) is not None
    assert kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid] == first
    assert spec_path(handle.cdi_dir, claim.uid).stat().st_mtime_ns == written
    assert kubelet_emulator.unprepare(DRIVER_NAME, [claim]) == {claim.uid: ""}
    assert not list(handle.cdi_dir.glob("gpuop-dra-*.json"))
    assert restarted.driver.checkpoint.claims == {}


def test_a_corrupt_checkpoint_is_set_aside_and_unprepare_still_cleans_up(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator, claims: Claims
) -> None:
    info = gpu_node_root("amd-single")
    handle = run_driver(info, publish=False)
    registered(kubelet_emulator)
    claim = claims.make([result(gpu_names(handle)[0])])
    assert kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid].error == ""
    handle.stop()
    handle.driver.checkpoint.path.write_text("{not json")
    restarted = run_driver(info, publish=False)
    registered(kubelet_emulator)
    assert restarted.driver.checkpoint.claims == {}
    assert list(handle.driver.checkpoint.path.parent.glob("checkpoint.json.bad-*"))
    assert kubelet_emulator.unprepare(DRIVER_NAME, [claim]) == {claim.uid: ""}
    assert not spec_path(handle.cdi_dir, claim.uid).exists()


def test_v1beta1_kubelet_gets_the_same_answers(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator, claims: Claims
) -> None:
    handle = run_driver(gpu_node_root("amd-single"), publish=False)
    registered(kubelet_emulator)
    claim = claims.make([result(gpu_names(handle)[0])])
    channel = dial_unix(handle.sockets.service_socket, timeout=5)
    try:
        stub = dra.DRAPluginStub(channel)
        response = stub.NodePrepareResources(
            dra.NodePrepareResourcesRequest(
                claims=[dra.Claim(namespace=claim.namespace, uid=claim.uid, name=claim.name)]
            ),
            timeout=10,
        )
        entry = response.claims[claim.uid]
        assert entry.error == "" and [d.device_name for d in entry.devices] == [gpu_names(handle)[0]]
        done = stub.NodeUnprepareResources(
            dra.NodeUnprepareResourcesRequest(
                claims=[dra.Claim(namespace=claim.namespace, uid=claim.uid, name=claim.name)]
            ),
            timeout=10,
        )
        assert done.claims[claim.uid].error == ""
    finally:
        channel.close()


@pytest.mark.parametrize(
    ("case", "results", "message"),
    [
        ("other node", [result("GPU0", pool="gpu-node-2")], "not this node's"),
        ("unknown device", [result("gpu-0000-ff-00-0")], "gpu-0000-ff-00-0 is not (or no longer) present"),
        ("other driver", [result("GPU0", driver="gpu.amd.com")], "no device of driver gpu.gpuop.dev"),
        ("not allocated", None, "is not allocated"),
    ],
)
def test_a_bad_claim_fails_alone(  # noqa: PLR0917 - parametrize arguments plus fixtures
    case: str,
    results: list[dict[str, str]] | None,
    message: str,
    gpu_node_root: MakeRoot,
    run_driver: StartDriver,
    kubelet_emulator: KubeletEmulator,
    claims: Claims,
) -> None:
    handle = run_driver(gpu_node_root("amd-mi210x8"), publish=False)
    registered(kubelet_emulator)
    first, second = gpu_names(handle)[:2]
    good = claims.make([result(second)])
    # "GPU0" stands for a device this node does have (its name is only known once it runs).
    named = (
        None if results is None else [{**r, "device": r["device"].replace("GPU0", first)} for r in results]
    )
    bad = claims.make(named)
    answers = kubelet_emulator.prepare(DRIVER_NAME, [bad, good])
    assert message in answers[bad.uid].error, (case, answers[bad.uid].error)
    assert answers[bad.uid].devices == ()
    assert answers[good.uid].error == "" and [d.device_name for d in answers[good.uid].devices] == [second]
    assert not spec_path(handle.cdi_dir, bad.uid).exists()
    assert handle.driver.checkpoint.get(bad.uid) is None


def test_a_missing_claim_and_a_uid_mismatch_fail_alone(
    gpu_node_root: MakeRoot, run_driver: StartDriver, kubelet_emulator: KubeletEmulator, claims: Claims
) -> None:
    handle = run_driver(gpu_node_root("amd-single"), publish=False)
    registered(kubelet_emulator)
    real = claims.make([result(gpu_names(handle)[0])])
    ghost = DraClaim("default", "0000-gone", "no-such-claim")
    stale = DraClaim(real.namespace, "1111-stale", real.name)  # a deleted claim's successor
    answers = kubelet_emulator.prepare(DRIVER_NAME, [ghost, stale, real])
    assert "not found" in answers[ghost.uid].error
    assert "the kubelet asked for '1111-stale'" in answers[stale.uid].error
    assert answers[real.uid].error == ""


@pytest.mark.parametrize("profile", ["amd-mi210x8", "nvidia-h100x8"])
def test_a_vanished_gpu_fails_its_claim(
    profile: str,
    gpu_node_root: MakeRoot,
    run_driver: StartDriver,
    kubelet_emulator: KubeletEmulator,
    claims: Claims,
) -> None:
    info = gpu_node_root(profile)
    handle = run_driver(info, publish=False)
    registered(kubelet_emulator)
    bdf = info.pci_addresses[2]
    lost = next(
        n
        for n, d in handle.service.inventory.devices().items()
        if d.attributes["pciAddress"]["string"] == bdf
    )
    vanish_gpu(info.root, bdf)
    handle.service.wake()
    wait_until(lambda: lost not in handle.service.inventory.devices())
    claim = claims.make([result(lost)])
    answer = kubelet_emulator.prepare(DRIVER_NAME, [claim])[claim.uid]
    assert f"device {lost} is not (or no longer) present and healthy" in answer.error
