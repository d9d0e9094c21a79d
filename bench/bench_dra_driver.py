"""DRA driver: NodePrepareResources latency (1 and 8 devices), ResourceSlice publish time for a
64-partition MI300X CPX node, and the driver process's RSS.

Prepare runs through the kubelet emulator over real unix sockets against the console script in its
own process, with the claims in the simulated API server: each call reads the claim, writes the
CDI spec and fsyncs the checkpoint; the unprepare in between makes every prepare do the full work.
Publishing runs in-process against the simulated API server (list, diff, write every slice of the
pool at a new generation).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpuop_common.gpu import AmdSysfsBackend, open_backends
from gpuop_common.kube import make_api_client
from gpuop_common.kubejson import NODES, RESOURCECLAIMS, KubeJson
from gpuop_dra_driver import DRIVER_NAME
from gpuop_dra_driver.devices import DraDevice, build_devices
from gpuop_dra_driver.publisher import SlicePublisher
from gpuop_sim.apiserver.server import SimApiServer
from gpuop_sim.kubelet import DraClaim, KubeletEmulator
from gpuop_sim.nodes import amd_driver, build_node_root
from gpuop_sim.shortpaths import short_tmp_dir

NODE = "bench-node"
PREPARES = 300
PUBLISHES = 20


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _claim(api: KubeJson, name: str, devices: list[str]) -> DraClaim:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": DRIVER_NAME, "count": len(devices)}}
                ]
            }
        },
    }
    claim = api.create(RESOURCECLAIMS, body, "default")
    results = [{"request": "gpus", "driver": DRIVER_NAME, "pool": NODE, "device": d} for d in devices]
    api.replace_status(RESOURCECLAIMS, claim, {"allocation": {"devices": {"results": results}}})
    return DraClaim("default", claim["metadata"]["uid"], name)


def _prepare_rows(root: Path, env: dict[str, str], work: Path, server: SimApiServer) -> list[dict[str, Any]]:
    kubeconfig = server.write_kubeconfig(work / "kubeconfig")
    api = KubeJson(make_api_client(kubeconfig))
    api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    rows: list[dict[str, Any]] = []
    with KubeletEmulator(short_tmp_dir("bd-")) as kubelet:
        plugins = kubelet.root / "var/lib/kubelet/plugins"
        plugins.mkdir(parents=True, exist_ok=True)
        kubelet.plugins_registry.mkdir(parents=True, exist_ok=True)
        args = [sys.executable, "-m", "gpuop_dra_driver.main", f"--host-root={root}", f"--node-name={NODE}",
                f"--kubeconfig={kubeconfig}", f"--plugins-dir={plugins}",
                f"--registry-dir={kubelet.plugins_registry}", f"--cdi-spec-dir={work / 'cdi'}",
                "--bind-address=127.0.0.1", "--probe-port=0", "--log-level=warning"]  # fmt: skip
        start = time.perf_counter()
        proc = subprocess.Popen(
            args, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            kubelet.wait_for(lambda: DRIVER_NAME in kubelet.dra_drivers(), 60)
            registered = time.perf_counter() - start
            names = sorted(d.name for d in build_devices(open_backends(root)[0].enumerate()))
            for size in (1, 8):
                claim = _claim(api, f"bench-{size}", names[:size])
                for _ in range(20):  # warm up
                    kubelet.prepare(DRIVER_NAME, [claim])
                    kubelet.unprepare(DRIVER_NAME, [claim])
                samples = []
                for _ in range(PREPARES):
                    t0 = time.perf_counter()
                    answer = kubelet.prepare(DRIVER_NAME, [claim])[claim.uid]
                    samples.append((time.perf_counter() - t0) * 1000.0)
                    assert not answer.error, answer.error
                    kubelet.unprepare(DRIVER_NAME, [claim])
                label = f"NodePrepareResources {size} device(s)"
                notes = f"{PREPARES} calls, MI300X CPX partitions, unprepare between"
                rows += [
                    {
                        "name": f"{label} p50",
                        "value": statistics.median(samples),
                        "unit": "ms",
                        "notes": notes,
                    },
                    {"name": f"{label} p99", "value": _percentile(samples, 0.99), "unit": "ms"},
                ]
            rss = _rss_kib(proc.pid)
        finally:
            proc.terminate()
            proc.wait(20)
    rows += [
        {"name": "launch -> registered", "value": registered, "unit": "s",
         "notes": "Popen of the console script until the kubelet lists the driver (imports, first publish)"},
        {"name": "RSS after the prepare runs", "value": rss / 1024, "unit": "MiB",
         "notes": f"driver process, {2 * (PREPARES + 20)} prepare/unprepare pairs"},
    ]  # fmt: skip
    return rows


def _variant(devices: list[DraDevice], n: int) -> list[DraDevice]:
    """The same devices with one attribute changed, so each publish is a real change."""
    return [replace(d, attributes={**d.attributes, "benchRound": {"int": n}}) for d in devices]


def _publish_rows(devices: list[DraDevice], server: SimApiServer, work: Path) -> list[dict[str, Any]]:
    api = KubeJson(make_api_client(server.write_kubeconfig(work / "kubeconfig-pub")))
    publisher = SlicePublisher(api, NODE + "-pub", DRIVER_NAME)
    publisher.publish(devices)
    changed, unchanged = [], []
    for n in range(PUBLISHES):
        variant = _variant(devices, n)
        t0 = time.perf_counter()
        publisher.publish(variant)
        changed.append((time.perf_counter() - t0) * 1000.0)
        t0 = time.perf_counter()
        assert publisher.publish(variant).empty
        unchanged.append((time.perf_counter() - t0) * 1000.0)
    label = f"ResourceSlice publish, {len(devices)} partitions"
    return [
        {"name": f"{label}, changed", "value": statistics.median(changed), "unit": "ms",
         "notes": f"median of {PUBLISHES}: list + replace the pool's slice at a new generation"},
        {"name": f"{label}, unchanged", "value": statistics.median(unchanged), "unit": "ms",
         "notes": "list + content-hash compare, nothing written"},
    ]  # fmt: skip


def run() -> list[dict[str, Any]]:
    work = short_tmp_dir("bdra-")
    server = SimApiServer().start()
    try:
        info = build_node_root("amd-mi300x-cpx", work / "root")
        # The capture lacks one XCD of its last GPU; re-laying that GPU (QPX, then CPX) gives all 64.
        backend = AmdSysfsBackend(info.root, writer=amd_driver.write_attr)
        backend.set_partition_mode(info.pci_addresses[7], "qpx_nps4")
        backend.set_partition_mode(info.pci_addresses[7], "cpx_nps4")
        devices = build_devices(open_backends(info.root)[0].enumerate())
        rows = _publish_rows(devices, server, work)
        rows += _prepare_rows(info.root, info.env, work, server)
        return rows
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
