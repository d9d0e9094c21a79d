"""Whatever text the hardware reports, every label key and value the labeller emits is valid."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from gpuop_common.gpu import GpuDevice
from gpuop_node_labeller import LabelOptions, labels_for
from gpuop_node_labeller.events import UdevEvents
from gpuop_node_labeller.sanitize import is_valid_key, is_valid_value, sanitise
from gpuop_sim.nodes import NodeRootInfo
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

NodeGpus = Callable[..., tuple[NodeRootInfo, list[GpuDevice]]]


@given(st.text(max_size=200), st.sampled_from(["-", "_"]))
def test_sanitise_gives_valid_values(text: str, space: str) -> None:
    assert is_valid_value(sanitise(text, space))


@pytest.fixture(scope="module")
def sample_gpus(tmp_path_factory: pytest.TempPathFactory) -> list[GpuDevice]:
    from gpuop_common.gpu import AmdSysfsBackend
    from gpuop_sim.nodes import build_node_root

    info = build_node_root("amd-mi300x-spx", tmp_path_factory.mktemp("fuzz") / "root")
    return AmdSysfsBackend(info.root).enumerate()[:2]


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    product=st.one_of(st.none(), st.text(max_size=120)),
    model=st.text(max_size=120),
    driver=st.one_of(st.none(), st.text(max_size=80)),
    family=st.one_of(st.none(), st.text(max_size=30)),
)
def test_any_reported_text_yields_valid_labels(
    sample_gpus: list[GpuDevice], product: str | None, model: str, driver: str | None, family: str | None
) -> None:
    edited = [
        dataclasses.replace(
            sample_gpus[0], product_name=product, model=model, driver_version=driver, family=family
        ),
        sample_gpus[1],
    ]
    for options in (LabelOptions(), LabelOptions(beta_labels=False, counter_labels=False)):
        for key, value in labels_for(edited, options).items():
            assert is_valid_key(key), key
            assert is_valid_value(value), (key, value)


def test_without_libudev_the_labeller_falls_back_to_resyncs(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pyudev", None)  # `import pyudev` now raises ImportError
    assert UdevEvents().start(lambda _reason: None) is False
    assert any("periodic resync" in r.getMessage() for r in caplog.records)
