"""AgentSettings / parse_settings: precedence, --help, and one-line errors with exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuop_common.settings import AgentSettings, parse_settings
from pydantic import Field


class ExampleSettings(AgentSettings):
    interval: float = Field(30.0, gt=0, description="Seconds between passes of the main loop.")


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NODE_NAME", "GPUOP_NODE_NAME", "GPUOP_PROBE_PORT", "GPUOP_CONFIG", "GPUOP_INTERVAL"):
        monkeypatch.delenv(name, raising=False)


def _error_of(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        parse_settings(ExampleSettings, argv, prog="gpuop-example")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1, err
    return err


def test_base_settings_have_an_interval() -> None:
    assert parse_settings(AgentSettings, []).interval == 30.0
    assert parse_settings(AgentSettings, ["--interval", "2.5"]).interval == 2.5


def test_defaults() -> None:
    settings = parse_settings(ExampleSettings, [])
    assert settings.host_root == Path("/")
    assert settings.bind_address == "0.0.0.0"
    assert settings.once is False
    assert settings.dry_run is False
    assert settings.log_level == "info"
    assert settings.kubeconfig is None
    assert settings.interval == 30.0


def test_precedence_cli_over_env_over_file_over_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings_file = tmp_path / "settings.yaml"
    settings_file.write_text("probe_port: 1001\ninterval: 3\nlog-level: warning\nhost_root: /from-file\n")
    monkeypatch.setenv("GPUOP_PROBE_PORT", "1002")
    monkeypatch.setenv("GPUOP_INTERVAL", "4")

    settings = parse_settings(ExampleSettings, ["--config", str(settings_file), "--probe-port", "1003"])

    assert settings.probe_port == 1003  # CLI beats env and file
    assert settings.interval == 4.0  # env beats file
    assert settings.log_level == "warning"  # file beats default
    assert settings.host_root == Path("/from-file")
    assert settings.bind_address == "0.0.0.0"  # default


def test_config_file_named_by_env_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings_file = tmp_path / "settings.json"
    settings_file.write_text('{"dry_run": true, "interval": 7}')
    monkeypatch.setenv("GPUOP_CONFIG", str(settings_file))
    settings = parse_settings(ExampleSettings, [])
    assert settings.dry_run is True
    assert settings.interval == 7.0


def test_boolean_flags_and_bind_address_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUOP_BIND_ADDRESS", "127.0.3.4")
    settings = parse_settings(ExampleSettings, ["--once", "--dry-run"])
    assert settings.once is True
    assert settings.dry_run is True
    assert settings.bind_address == "127.0.3.4"


def test_node_name_from_downward_api_env_and_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NODE_NAME", "gpu-node-1")
    assert parse_settings(ExampleSettings, []).node_name == "gpu-node-1"
    monkeypatch.setenv("GPUOP_NODE_NAME", "gpu-node-2")
    assert parse_settings(ExampleSettings, []).node_name == "gpu-node-2"
    assert parse_settings(ExampleSettings, ["--node-name", "gpu-node-3"]).node_name == "gpu-node-3"


def test_help_lists_every_common_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_settings(ExampleSettings, ["--help"], prog="gpuop-example")
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: gpuop-example")
    for flag in (
        "--host-root",
        "--node-name",
        "--kubeconfig",
        "--config",
        "--once",
        "--dry-run",
        "--log-level",
        "--bind-address",
        "--probe-port",
        "--interval",
    ):
        assert flag in out
    assert "Seconds between passes of the main loop." in out
    assert "GPUOP_PROBE_PORT" in out


def test_wrong_type_names_flag_and_env(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error_of(capsys, ["--probe-port", "abc"])
    assert err.startswith("gpuop-example: error: invalid --probe-port (GPUOP_PROBE_PORT)")
    assert "'abc'" in err


def test_out_of_range_port(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error_of(capsys, ["--probe-port", "70000"])
    assert "--probe-port" in err
    assert "65535" in err


def test_invalid_enum(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error_of(capsys, ["--log-level", "loud"])
    assert "--log-level" in err
    assert "'loud'" in err


def test_unknown_flag(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error_of(capsys, ["--no-such-flag"])
    assert "--no-such-flag" in err


def test_bad_env_value(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUOP_INTERVAL", "-1")
    err = _error_of(capsys, [])
    assert "--interval (GPUOP_INTERVAL)" in err


def test_bind_address_must_be_an_ip(capsys: pytest.CaptureFixture[str]) -> None:
    err = _error_of(capsys, ["--bind-address", "not-an-ip"])
    assert "--bind-address" in err


def test_settings_file_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.yaml"
    assert str(missing) in _error_of(capsys, ["--config", str(missing)])

    broken = tmp_path / "broken.yaml"
    broken.write_text("probe_port: [1\n")
    assert str(broken) in _error_of(capsys, ["--config", str(broken)])

    not_a_mapping = tmp_path / "list.yaml"
    not_a_mapping.write_text("- 1\n- 2\n")
    assert "mapping" in _error_of(capsys, ["--config", str(not_a_mapping)])

    unknown_key = tmp_path / "unknown.yaml"
    unknown_key.write_text("probe_prot: 1\n")
    assert "probe_prot" in _error_of(capsys, ["--config", str(unknown_key)])

    bad_value = tmp_path / "bad.yaml"
    bad_value.write_text("interval: soon\n")
    assert "--interval" in _error_of(capsys, ["--config", str(bad_value)])
