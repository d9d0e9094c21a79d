"""Flags and env vars of gpuop-metrics-exporter."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuop_common.settings import parse_settings
from gpuop_metrics_exporter.settings import ExporterSettings


def test_defaults_match_the_vendor_exporters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUOP_INTERVAL", raising=False)
    settings = parse_settings(ExporterSettings, [])
    assert settings.port == 5000
    assert settings.pod_resources_socket == Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    assert settings.config_file == Path("/etc/gpuop/config.yaml")
    assert settings.interval_override is None  # the config file's collectionIntervalSeconds applies


def test_flags_and_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUOP_PORT", "9400")
    settings = parse_settings(ExporterSettings, ["--interval=0.5", "--vendor=nvidia"])
    assert (settings.port, settings.interval_override, settings.vendor) == (9400, 0.5, "nvidia")


@pytest.mark.parametrize("argv", [["--port=70000"], ["--vendor=intel"], ["--interval=0"]])
def test_bad_values_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse_settings(ExporterSettings, argv, prog="gpuop-metrics-exporter")
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.startswith("gpuop-metrics-exporter: error: ")
