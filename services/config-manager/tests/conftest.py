"""Shared set-up: a simulated GPU node root, its Node on the simulated API server, and an agent."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from gpuop_common.config.config_manager import ConfigManagerConfig
from gpuop_common.gpu.amd_reload import DriverReloader
from gpuop_common.gpu.amd_smi import partition_writer
from gpuop_common.gpu.hostcmd import HostCommands, host_exec_argv
from gpuop_config_manager.agent import ConfigManagerAgent
from gpuop_config_manager.gpus import NodeGpus
from gpuop_config_manager.kubeio import NodeClient
from gpuop_config_manager.labels import STATE_LABEL
from gpuop_sim import hostfakes
from gpuop_sim.nodes import NodeRootInfo
from kubernetes import client

NODE = "gpu-node"
DEPLOY = {
    "gpuop.dev/deploy.device-plugin": "true",
    "gpuop.dev/deploy.metrics-exporter": "true",
    "gpuop.dev/deploy.test-runner": "false",
}
PROFILES = [
    {"name": "cpx-nps4", "amd": {"computePartition": "CPX", "memoryPartition": "NPS4"}},
    {"name": "spx-nps1", "amd": {"computePartition": "SPX", "memoryPartition": "NPS1"}},
    {"name": "cpx-nps1", "amd": {"computePartition": "CPX", "memoryPartition": "NPS1"}},
    {"name": "spx-nps4", "amd": {"computePartition": "SPX", "memoryPartition": "NPS4"}},
    {"name": "all-1g.10gb", "nvidia": [{"migEnabled": True, "migDevices": {"1g.10gb": 7}}]},
    {"name": "all-disabled", "nvidia": [{"migEnabled": False}]},
    {"name": "too-big", "nvidia": [{"migEnabled": True, "migDevices": {"3g.40gb": 2, "1g.10gb": 1}}]},
]


class RecordingClient(NodeClient):
    """The real client, also keeping every label patch so tests can read the state sequence."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.label_patches: list[dict[str, str | None]] = []

    def patch(self, labels=None, annotations=None):  # type: ignore[no-untyped-def]
        if labels:
            self.label_patches.append(dict(labels))
        super().patch(labels, annotations)

    def states(self) -> list[str]:
        return [str(p[STATE_LABEL]) for p in self.label_patches if p.get(STATE_LABEL)]


@dataclass
class Harness:
    NODE = NODE
    DEPLOY = DEPLOY

    info: NodeRootInfo
    api: Any
    config: ConfigManagerConfig
    kube: RecordingClient
    gpus: NodeGpus
    made: list[NodeGpus] = field(default_factory=list)
    partition_tool: str = "sysfs"

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    def agent(self, **kwargs: Any) -> ConfigManagerAgent:
        return ConfigManagerAgent(
            kube=self.kube, gpus=self.gpus, config=lambda: self.config, poll_seconds=0.05, **kwargs
        )

    def node(self) -> Any:
        return self.core.read_node(NODE).metadata

    def label(self, **labels: str | None) -> None:
        self.core.patch_node(NODE, {"metadata": {"labels": labels}})

    def events(self) -> list[str]:
        listed = self.core.list_namespaced_event("default")
        return [e.reason for e in sorted(listed.items, key=lambda e: int(e.metadata.resource_version))]

    def restart(self) -> None:
        """A new agent process: fresh backends and client (the old ones are dropped)."""
        self.gpus.close()
        self.gpus = node_gpus(self.info, self.partition_tool)
        self.made.append(self.gpus)
        self.kube = RecordingClient(self.api, NODE)

    def use_partition_tool(self, tool: str) -> None:
        """Start again with `--partition-tool tool` (auto, sysfs, amd-smi)."""
        self.partition_tool = tool
        self.restart()


def node_gpus(info: NodeRootInfo, partition_tool: str = "sysfs") -> NodeGpus:
    """The node's GPUs as the service opens them, its host commands (driver reloads, `amd-smi`) sent
    to the host-command fakes (`modprobe` there unloads and loads the simulated driver)."""
    host = HostCommands(tuple(host_exec_argv(hostfakes.host_exec_for(info.root), str(info.root))), 120)
    amd_writer, _chosen = partition_writer(partition_tool, host)
    return NodeGpus.open(info.root, reloader=DriverReloader(host.prefix), amd_writer=amd_writer)


@pytest.fixture
def harness(
    gpu_node_root: Callable[..., NodeRootInfo], kube_api_client: Any, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[..., Harness]]:
    made: list[Harness] = []

    def make(profile: str, labels: dict[str, str] | None = None, **config: Any) -> Harness:
        info = gpu_node_root(profile, NODE)
        for key, value in info.env.items():
            monkeypatch.setenv(key, value)  # the simulated driver and fake NVML, as a node's pod has them
        body = client.V1Node(metadata=client.V1ObjectMeta(name=NODE, labels={**DEPLOY, **(labels or {})}))
        client.CoreV1Api(kube_api_client).create_node(body)
        cfg = ConfigManagerConfig.model_validate({"profiles": PROFILES, **config})
        harness = Harness(info, kube_api_client, cfg, RecordingClient(kube_api_client, NODE), node_gpus(info))
        made.append(harness)
        return harness

    yield make
    for h in made:
        h.gpus.close()
