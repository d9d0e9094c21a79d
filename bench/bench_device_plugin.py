"""Device plugin: Allocate latency vs a do-nothing grpcio plugin and with time-slicing on, launch-to-
Register, health-change-to-update latency and RSS under 10,000 Allocates, all through the kubelet
emulator over unix sockets.

Both plugins run as their own processes, as on a node (the plugin's health poll shares a GIL with
its gRPC handlers, not with the kubelet). The null plugin is the floor any Python gRPC plugin pays;
the two are measured interleaved in the same run, so the ratio is what matters.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gpuop_common.config import DevicePluginConfig
from gpuop_common.gpu import open_backends
from gpuop_common.kubelet import deviceplugin as dp
from gpuop_device_plugin.inventory import build_plan
from gpuop_device_plugin.plugin import DevicePluginAdapter, ResourceView
from gpuop_sim.kubelet import KubeletEmulator
from gpuop_sim.nodes import build_node_root, vanish_gpu
from gpuop_sim.shortpaths import short_tmp_dir

ALLOCATES = 2000
RSS_ALLOCATES = 10_000
FLIPS = 20
RESOURCE = "amd.com/gpu"
REPLICAS = 4  # time-sliced rows: `sharing.timeSlicing.replicas`
NULL_RESOURCE = "example.com/null"
NO_CONTEXT: Any = None  # the handlers only touch the context to abort, which a valid request never does

# A complete do-nothing device plugin: serve, register, answer every call with the least allowed.
NULL_PLUGIN = """
import sys, threading, time
from gpuop_common.kubelet import deviceplugin as dp, dial_unix, serve_unix

class Null(dp.DevicePluginServicer):
    def GetDevicePluginOptions(self, request, context):
        return dp.DevicePluginOptions()
    def ListAndWatch(self, request, context):
        devices = [dp.Device(ID=f"null-{i}", health=dp.HEALTHY) for i in range(8)]
        yield dp.ListAndWatchResponse(devices=devices)
        while context.is_active():
            time.sleep(0.2)
    def Allocate(self, request, context):
        return dp.AllocateResponse(container_responses=[dp.ContainerAllocateResponse()])
    def GetPreferredAllocation(self, request, context):
        return dp.PreferredAllocationResponse()
    def PreStartContainer(self, request, context):
        return dp.PreStartContainerResponse()

socket_dir = sys.argv[1]
server = serve_unix(f"{socket_dir}/null.sock", [lambda s: dp.add_DevicePluginServicer_to_server(Null(), s)])
with dial_unix(f"{socket_dir}/kubelet.sock", 5) as channel:
    dp.RegistrationStub(channel).Register(
        dp.RegisterRequest(version=dp.VERSION, endpoint="null.sock", resource_name=sys.argv[2]))
threading.Event().wait()
"""


def _percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _time_allocates(kubelet: KubeletEmulator, resource: str, device: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        kubelet.allocate(resource, [device])
        out.append((time.perf_counter() - start) * 1000.0)
    return out


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@contextmanager
def _process(args: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        proc.wait(20)


def _plugin_args(root: Path, kubelet: KubeletEmulator, config: Path) -> list[str]:
    return [sys.executable, "-m", "gpuop_device_plugin.main", f"--host-root={root}",
            f"--socket-dir={kubelet.socket_dir}", f"--config-file={config}",
            "--bind-address=127.0.0.1", "--probe-port=0", "--no-udev", "--log-level=warning"]  # fmt: skip


def _health_is(kubelet: KubeletEmulator, device: str, health: str) -> Callable[[], bool]:
    return lambda: kubelet.resources()[RESOURCE][device] == health


def _health_flips(kubelet: KubeletEmulator, root: Path) -> list[float]:
    """Seconds from a GPU vanishing (or coming back) to the kubelet seeing the new health."""
    devices = sorted(kubelet.resources()[RESOURCE])
    samples: list[float] = []
    for i in range(FLIPS):
        victim = devices[i % len(devices)]
        start = time.perf_counter()
        vanished = vanish_gpu(root, victim)
        kubelet.wait_for(_health_is(kubelet, victim, "Unhealthy"), 10)
        samples.append(time.perf_counter() - start)
        start = time.perf_counter()
        vanished.restore()
        kubelet.wait_for(_health_is(kubelet, victim, "Healthy"), 10)
        samples.append(time.perf_counter() - start)
    return samples


def _service_rows(root: Path, work: Path) -> list[dict[str, Any]]:
    # The same plugin with time-slicing on, on a kubelet of its own (one amd.com/gpu per kubelet).
    shared_config = work / "shared.yaml"
    shared_config.write_text(f"sharing:\n  timeSlicing:\n    replicas: {REPLICAS}\n")
    with KubeletEmulator(work / "k1") as kubelet, KubeletEmulator(work / "k3") as shared_kubelet:
        null_args = [sys.executable, "-c", NULL_PLUGIN, str(kubelet.socket_dir), NULL_RESOURCE]
        with (
            _process(_plugin_args(root, kubelet, work / "none.yaml")) as ours_proc,
            _process(null_args),
            _process(_plugin_args(root, shared_kubelet, shared_config)),
        ):
            kubelet.wait_for(
                lambda: kubelet.allocatable().get(RESOURCE) == 8 and NULL_RESOURCE in kubelet.allocatable(),
                30,
            )
            shared_kubelet.wait_for(lambda: shared_kubelet.allocatable().get(RESOURCE) == 8 * REPLICAS, 30)
            device = sorted(kubelet.resources()[RESOURCE])[0]
            replica = sorted(shared_kubelet.resources()[RESOURCE])[0]  # `<id>::0`
            _time_allocates(kubelet, RESOURCE, device, 100)  # warm up every path
            _time_allocates(kubelet, NULL_RESOURCE, "null-0", 100)
            _time_allocates(shared_kubelet, RESOURCE, replica, 100)
            ours: list[float] = []
            base: list[float] = []
            shared: list[float] = []
            for _ in range(ALLOCATES // 100):  # interleave so all see the same machine load
                ours += _time_allocates(kubelet, RESOURCE, device, 100)
                base += _time_allocates(kubelet, NULL_RESOURCE, "null-0", 100)
                shared += _time_allocates(shared_kubelet, RESOURCE, replica, 100)
            flips = _health_flips(kubelet, root)
            done = 100 + len(ours)
            after_first = _rss_kib(ours_proc.pid)
            _time_allocates(kubelet, RESOURCE, device, RSS_ALLOCATES - done)
            after_10k = _rss_kib(ours_proc.pid)
    p50, p99 = statistics.median(ours), _percentile(ours, 0.99)
    b50, b99 = statistics.median(base), _percentile(base, 0.99)
    s50, s99 = statistics.median(shared), _percentile(shared, 0.99)
    return [
        {"name": "Allocate p50 (ours)", "value": p50, "unit": "ms",
         "notes": f"{ALLOCATES} calls, MI210 x8, 1 GPU"},
        {"name": "Allocate p99 (ours)", "value": p99, "unit": "ms", "target": "<= 1 ms"},
        {"name": "Allocate p50 (null grpcio plugin)", "value": b50, "unit": "ms",
         "notes": "same run, interleaved, own process"},
        {"name": "Allocate p99 (null grpcio plugin)", "value": b99, "unit": "ms"},
        {"name": "Allocate p50 ours / null", "value": p50 / b50, "unit": "x", "target": "<= 1.2x"},
        {"name": "Allocate p99 ours / null", "value": p99 / b99, "unit": "x", "target": "<= 1.2x"},
        {"name": f"Allocate p50 (ours, time-sliced x{REPLICAS})", "value": s50, "unit": "ms",
         "notes": "one replica `<id>::0`; same run, interleaved, own kubelet"},
        {"name": f"Allocate p99 (ours, time-sliced x{REPLICAS})", "value": s99, "unit": "ms"},
        {"name": "Allocate p50 shared / unshared", "value": s50 / p50, "unit": "x", "target": "~1 (noise)"},
        {"name": "Allocate p99 shared / unshared", "value": s99 / p99, "unit": "x", "target": "~1 (noise)"},
        {"name": "health change -> ListAndWatch p50", "value": statistics.median(flips), "unit": "s",
         "notes": f"{len(flips)} flips (vanish/restore one GPU), default 0.5 s poll"},
        {"name": "health change -> ListAndWatch p99", "value": _percentile(flips, 0.99), "unit": "s",
         "target": "<= 1 s",
         "notes": "AMD Go plugin with the operator's -pulse=30: 13.6 s mean, whole node only"},
        {"name": "RSS after 10,000 Allocates", "value": after_10k / 1024, "unit": "MiB",
         "target": "<= 60 MB", "notes": "plugin process, MI210 x8"},
        {"name": f"RSS growth {done:,} -> {RSS_ALLOCATES:,} Allocates",
         "value": (after_10k - after_first) / 1024,
         "unit": "MiB", "target": "~0 (no growth)"},
    ]  # fmt: skip


def _launch_rows(root: Path, work: Path) -> list[dict[str, Any]]:
    launches: list[float] = []
    with KubeletEmulator(work / "k2") as kubelet:
        for _ in range(3):
            start = time.perf_counter()
            with _process(_plugin_args(root, kubelet, work / "none.yaml")):
                kubelet.wait_for(lambda: kubelet.allocatable().get(RESOURCE) == 8, 30)
                launches.append(time.perf_counter() - start)
            kubelet.wait_for(lambda: kubelet.allocatable().get(RESOURCE, 0) == 0, 10)
    return [
        {"name": "launch -> Register (median of 3)", "value": statistics.median(launches), "unit": "s",
         "target": "<= 1 s",
         "notes": "Popen of the console script until the kubelet lists 8 GPUs (mostly imports)"},
    ]  # fmt: skip


def _handler_rows(root: Path) -> list[dict[str, Any]]:
    """In-process cost of answering Allocate without gRPC: first answer for a device set (built from
    the resource manager's state) vs. a repeat (remembered per device-list version)."""
    devices = build_plan(open_backends(root)[0].enumerate(), DevicePluginConfig()).resources[RESOURCE]
    view = ResourceView(RESOURCE)
    view.publish(devices, {d.id: dp.HEALTHY for d in devices})
    request = dp.AllocateRequest(
        container_requests=[dp.ContainerAllocateRequest(devices_ids=[devices[0].id])]
    )
    n = 5000

    def per_call_us(call: Callable[[], object]) -> float:
        start = time.perf_counter()
        for _ in range(n):
            call()
        return (time.perf_counter() - start) / n * 1e6

    def cold() -> object:
        return DevicePluginAdapter(view).Allocate(request, NO_CONTEXT)  # a fresh adapter remembers nothing

    warm_adapter = DevicePluginAdapter(view)

    def warm() -> object:
        return warm_adapter.Allocate(request, NO_CONTEXT)

    def empty() -> object:
        return dp.AllocateResponse(container_responses=[dp.ContainerAllocateResponse()])

    return [
        {"name": "Allocate handler, first answer", "value": per_call_us(cold), "unit": "us",
         "notes": "in-process, no gRPC; validate + build device specs and env"},
        {"name": "Allocate handler, repeated device set", "value": per_call_us(warm), "unit": "us",
         "notes": "answer remembered until the device list or health changes"},
        {"name": "Allocate handler, null plugin", "value": per_call_us(empty), "unit": "us"},
    ]  # fmt: skip


def run() -> list[dict[str, Any]]:
    work = short_tmp_dir("bdp-")
    try:
        root = work / "node"
        build_node_root("amd-mi210x8", root)
        return [*_service_rows(root, work), *_handler_rows(root), *_launch_rows(root, work)]
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    for row in run():
        print(row)
