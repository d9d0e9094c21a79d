"""Config manager: time from a profile label to `success` on a simulated node, and API writes per apply.

In-process agent against the simulated API server. "Agent time" is label-to-success minus the time
spent inside the simulated hardware (the amdgpu driver's re-lay of KFD/DRM files, the fake NVML's
state writes, the host-command fakes of the amdgpu reload an NPS change needs), so it is what the
config manager itself costs; the poll interval is excluded (the
pass starts at once after the label change). Writes count every non-read API call of one apply
(node patches, Events); steady state is ten more passes with nothing to do.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuop_common.config.config_manager import ConfigManagerConfig
from gpuop_common.gpu import AmdSysfsBackend, GpuBackend, NvmlBackend
from gpuop_common.gpu.amd_reload import DriverReloader, host_exec_argv
from gpuop_config_manager.agent import ConfigManagerAgent
from gpuop_config_manager.gpus import NodeGpus
from gpuop_config_manager.kubeio import NodeClient
from gpuop_sim import hostfakes
from gpuop_sim.apiserver import SimApiServer
from gpuop_sim.nodes import amd_driver, build_node_root
from gpuop_sim.nodes.fake_nvml import FakeNvml
from kubernetes import client, config

NODE = "bench-node"
READS = ("get", "list", "watch")
PROFILES = ConfigManagerConfig.model_validate(
    {
        "profiles": [
            {"name": "cpx-nps4", "amd": {"computePartition": "CPX", "memoryPartition": "NPS4"}},
            {"name": "spx-nps1", "amd": {"computePartition": "SPX", "memoryPartition": "NPS1"}},
            {"name": "all-1g.10gb", "nvidia": [{"migEnabled": True, "migDevices": {"1g.10gb": 7}}]},
        ]
    }
)


class _Timed:
    """Wraps a hardware call and adds up the seconds spent in it."""

    def __init__(self, call: Any) -> None:
        self.call = call
        self.seconds = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.time(self.call, *args, **kwargs)

    def time(self, call: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - start


def _writes(server: SimApiServer) -> int:
    return sum(count for (verb, _), count in server.stats().items() if verb not in READS)


def _measure(
    server: SimApiServer, api: Any, gpus: NodeGpus, *, label: str, profile: str, hw: _Timed
) -> dict[str, float]:
    core = client.CoreV1Api(api)
    core.patch_node(NODE, {"metadata": {"labels": {label: profile}}})
    agent = ConfigManagerAgent(
        kube=NodeClient(api, NODE), gpus=gpus, config=lambda: PROFILES, poll_seconds=0.01
    )
    before, hw_before = _writes(server), hw.seconds
    start = time.perf_counter()
    outcome = agent.run_once()
    total = time.perf_counter() - start
    writes = _writes(server) - before
    if outcome.state is None or outcome.state.value != "success":
        raise RuntimeError(f"{profile}: {outcome}")
    steady_before = _writes(server)
    for _ in range(10):
        agent.run_once()
    return {
        "total_s": total,
        "hardware_s": hw.seconds - hw_before,
        "writes": writes,
        "steady": _writes(server) - steady_before,
    }


def _with_server(tmp: Path, body: Any) -> Any:
    with SimApiServer() as server:
        kubeconfig = server.write_kubeconfig(tmp / "kubeconfig")
        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
        with client.ApiClient(configuration) as api:
            labels = {"gpuop.dev/deploy.device-plugin": "true", "gpuop.dev/deploy.metrics-exporter": "true"}
            client.CoreV1Api(api).create_node(
                client.V1Node(metadata=client.V1ObjectMeta(name=NODE, labels=labels))
            )
            return body(server, api)


def run() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-config-manager-") as tmp:
        info = build_node_root("amd-mi300x-spx", Path(tmp) / "amd")
        driver = _Timed(amd_driver.write_attr)

        def backends() -> list[GpuBackend]:
            return [AmdSysfsBackend(info.root, writer=driver)]

        # NPS changes take effect at a reload of amdgpu: the host-command fakes' modprobe (a
        # process per command) counts as simulated hardware too.
        host_exec = tuple(host_exec_argv(hostfakes.host_exec_for(info.root), str(info.root)))
        reloader = DriverReloader(host_exec, run=lambda *a, **k: driver.time(subprocess.run, *a, **k))
        amd = NodeGpus(backends(), reopen=backends, reloader=reloader)

        def amd_body(server: SimApiServer, api: Any) -> list[dict[str, float]]:
            label = "gpuop.dev/gpu-config-profile"
            return [
                _measure(server, api, amd, label=label, profile=p, hw=driver)
                for p in ("cpx-nps4", "spx-nps1")
            ]

        amd_results = _with_server(Path(tmp), amd_body)
        amd.close()
        nv_info = build_node_root("nvidia-h100x8", Path(tmp) / "nvidia")
        nvml = FakeNvml(path=nv_info.nvml_state_path)
        saves = _Timed(nvml._save)
        nvml._save = saves  # type: ignore[method-assign]
        nvidia = NodeGpus([NvmlBackend(nvml, nv_info.root)])
        nv_results = _with_server(
            Path(tmp),
            lambda s, a: [
                _measure(s, a, nvidia, label="nvidia.com/mig.config", profile="all-1g.10gb", hw=saves)
            ],
        )
        nvidia.close()
    for name, result in (
        ("MI300X x8 SPX/NPS1 -> CPX/NPS4", amd_results[0]),
        ("MI300X x8 CPX/NPS4 -> SPX/NPS1", amd_results[1]),
        ("H100 x8 MIG off -> all-1g.10gb", nv_results[0]),
    ):
        agent_s = result["total_s"] - result["hardware_s"]
        rows += [
            {
                "name": f"config-manager label -> success, {name}",
                "value": agent_s,
                "unit": "s",
                "target": "<= 5",
                "notes": f"agent time; {result['total_s']:.2f} s in all, "
                f"{result['hardware_s']:.2f} s of it in simulated hardware",
            },
            {
                "name": f"config-manager API writes per apply, {name}",
                "value": int(result["writes"]),
                "unit": "writes",
                "target": "<= 12",
                "notes": f"node patches + Events; then {int(result['steady'])} writes in 10 steady passes",
            },
        ]
    return rows


if __name__ == "__main__":
    for row in run():
        print(row)
