"""Fixtures of the exporter tests: a collector over a simulated node root and exposition parsing."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from gpuop_common.config import MetricsExporterConfig
from gpuop_common.gpu import open_backends
from gpuop_common.kubelet.assignments import PodResourcesWatcher
from gpuop_metrics_exporter.collector import MetricsCollector
from gpuop_sim.nodes import NodeRootInfo
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

NODE = "node-a"


@dataclass
class Scrape:
    """One parsed exposition: samples by name, family types by family name."""

    samples: list[Sample]
    types: dict[str, str]
    by_family: dict[str, list[Sample]]

    def named(self, name: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name]

    def find(self, name: str, **labels: str) -> list[Sample]:
        return [s for s in self.named(name) if all(s.labels.get(k) == v for k, v in labels.items())]

    def value(self, name: str, **labels: str) -> float:
        found = self.find(name, **labels)
        assert len(found) == 1, f"{name}{labels}: {len(found)} samples: {found[:3]}"
        return float(found[0].value)

    def names(self) -> set[str]:
        return {s.name for s in self.samples}


def parse(body: bytes) -> Scrape:
    samples: list[Sample] = []
    types: dict[str, str] = {}
    by_family: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(body.decode("utf-8")):
        assert family.name not in types, f"family {family.name} appears twice"
        types[family.name] = family.type
        by_family[family.name] = list(family.samples)
        samples.extend(family.samples)
    return Scrape(samples, types, by_family)


@pytest.fixture
def parse_exposition() -> Callable[[bytes], Scrape]:
    return parse


@dataclass
class Exporter:
    info: NodeRootInfo
    collector: MetricsCollector

    @property
    def root(self) -> Path:
        return self.info.root

    def scrape(self) -> Scrape:
        self.collector.collect_once()
        return parse(self.collector.exposition(gzip_ok=False))


ExporterFactory = Callable[..., Exporter]


@pytest.fixture
def exporter_for(
    gpu_node_root: Callable[..., NodeRootInfo], monkeypatch: pytest.MonkeyPatch
) -> Iterator[ExporterFactory]:
    made: list[MetricsCollector] = []

    def make(
        profile: str,
        config: MetricsExporterConfig | None = None,
        pod_resources_socket: Path | None = None,
    ) -> Exporter:
        info = gpu_node_root(profile, NODE)
        for key, value in info.env.items():
            monkeypatch.setenv(key, value)
        pods = PodResourcesWatcher(pod_resources_socket, timeout=2.0) if pod_resources_socket else None
        collector = MetricsCollector(
            lambda: open_backends(info.root),
            hostname=NODE,
            config=config or MetricsExporterConfig(),
            pods=pods,
        )
        made.append(collector)
        return Exporter(info, collector)

    yield make
    for collector in made:
        collector.stop()
