"""Node labeller cost: computing the labels of the MI300X CPX capture, and API writes in steady state.

The CPX root is the largest real topology (8 GPUs, 63 KFD partition nodes); `labels_for` is the pure
part, "read + compute" adds the backend's sysfs walk a labelling pass does. Steady state runs an hour
of 60 s resyncs against the simulated API server with nothing changing; the only writes allowed are
the first pass's (labels, and the `GPUHealthy` condition through nodes/status). Then a RAS fault and
its reset: the pass that turns `GPUHealthy` False, and the writes a fault and its recovery cost.
"""

from __future__ import annotations

import contextlib
import io
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuop_common.gpu import AmdSysfsBackend
from gpuop_node_labeller import LabelOptions, labels_for
from gpuop_node_labeller.agent import NodeLabeller
from gpuop_sim import hostfakes
from gpuop_sim.apiserver import SimApiServer
from gpuop_sim.nodes import break_gpu, build_node_root
from kubernetes import client, config

RUNS = 21
INTERVAL_S = 60  # the default resync interval
PASSES_PER_HOUR = 3600 // INTERVAL_S


def _median_ms(call: Callable[[], object], runs: int) -> float:
    call()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(samples)


def _patches(server: SimApiServer) -> int:
    """PATCHes of Node objects and of their status (the stats count both under `nodes`)."""
    return server.stats().get(("patch", "nodes"), 0)


def _steady_state(root: Path, tmp: Path) -> tuple[int, int, float, float, int]:
    """(PATCHes of the first pass, PATCHes over an hour of passes, ms per steady pass,
    ms of the pass that publishes a fault, PATCHes for a fault and its recovery)."""
    with SimApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp / "kubeconfig")
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        with client.ApiClient(configuration) as api:
            client.CoreV1Api(api).create_node(client.V1Node(metadata=client.V1ObjectMeta(name="bench-node")))
            labeller = NodeLabeller(host_root=root, node_name="bench-node", api=api, options=LabelOptions)
            labeller.run_once()
            first = _patches(server)
            start = time.perf_counter()
            for _ in range(PASSES_PER_HOUR):
                labeller.run_once()
            per_pass = (time.perf_counter() - start) * 1000.0 / PASSES_PER_HOUR
            steady = _patches(server) - first
            gpu = sorted(p.name for p in (root / "sys/bus/pci/devices").iterdir())[0]
            before_fault = _patches(server)
            break_gpu(root, gpu, "ras")
            start = time.perf_counter()
            result = labeller.run_once()
            fault_ms = (time.perf_counter() - start) * 1000.0
            assert result.condition is not None and result.condition.status == "False", result.condition
            with contextlib.redirect_stdout(io.StringIO()):
                hostfakes.main(["--root", str(root), "amd-smi", "reset", "-G", "-g", gpu])
            for _ in range(3):  # recovery, then nothing more to write
                labeller.run_once()
            fault_writes = _patches(server) - before_fault
            labeller.close()
    return first, steady, per_pass, fault_ms, fault_writes


def run(runs: int = RUNS) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="bench-labeller-") as tmp:
        info = build_node_root("amd-mi300x-cpx", Path(tmp) / "amd")
        backend = AmdSysfsBackend(info.root)
        gpus = backend.enumerate()
        options = LabelOptions()
        count = len(labels_for(gpus, options))
        compute_ms = _median_ms(lambda: labels_for(gpus, options), runs)
        pass_ms = _median_ms(lambda: labels_for(backend.enumerate(), options), runs)
        first, steady, steady_ms, fault_ms, fault_writes = _steady_state(info.root, Path(tmp))
    return [
        {
            "name": "node-labeller labels_for() MI300X CPX",
            "value": compute_ms,
            "unit": "ms",
            "target": "<= 50",
            "notes": f"median of {runs}; 8 GPUs, 63 partitions -> {count} labels; pure computation",
        },
        {
            "name": "node-labeller read + labels_for() MI300X CPX",
            "value": pass_ms,
            "unit": "ms",
            "target": "<= 50",
            "notes": f"median of {runs}; backend enumerate() (warm KFD cache) plus labels_for()",
        },
        {
            "name": "node-labeller API writes, steady state",
            "value": steady,  # the passes span one hour of resyncs
            "unit": "PATCH/hour",
            "target": "0",
            "notes": f"{PASSES_PER_HOUR} resyncs, {INTERVAL_S} s apart, after a first pass that sent {first} "
            "(labels + GPUHealthy)",
        },
        {
            "name": "node-labeller steady-state pass against the API server",
            "value": steady_ms,
            "unit": "ms",
            "notes": "enumerate + labels_for + health() + GET node + diff, no write; sim API server",
        },
        {
            "name": "node-labeller RAS fault to GPUHealthy=False",
            "value": fault_ms,
            "unit": "ms",
            "notes": "the pass after the fault (health + nodes/status PATCH); cluster: + up to one resync",
        },
        {
            "name": "node-labeller API writes per GPU fault and reset",
            "value": fault_writes,
            "unit": "PATCH",
            "target": "2",
            "notes": "GPUHealthy False, then True after amd-smi reset; 3 more passes write nothing",
        },
    ]


if __name__ == "__main__":
    for row in run():
        print(row)
