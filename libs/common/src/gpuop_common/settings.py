"""Settings every gpuop service starts from: CLI flags, `GPUOP_*` env vars and an optional settings file.

Precedence is CLI > env > settings file (`--config FILE`) > defaults. Services subclass `AgentSettings`
and add their own fields; `parse_settings` is the one entry point a `main()` calls. It prints `--help`
and, on bad input, one line naming the field (flag and env var) and exits with code 2, never a
traceback.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar

import yaml
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import (
    BaseSettings,
    CliSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
)

ENV_PREFIX = "GPUOP_"
USAGE_ERROR_EXIT_CODE = 2

LogLevel = Literal["debug", "info", "warning", "error", "critical"]

S = TypeVar("S", bound="AgentSettings")


class SettingsFileError(ValueError):
    """The `--config` settings file is missing, unreadable or not a mapping."""

    def __init__(self, path: Path | str, reason: str) -> None:
        super().__init__(f"settings file {path}: {reason}")
        self.path = Path(path)
        self.reason = reason


def load_mapping_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON file (JSON is YAML) that must hold a mapping; empty file = empty mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SettingsFileError(path, exc.strerror or str(exc)) from exc
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SettingsFileError(path, f"not valid YAML/JSON: {detail}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsFileError(path, f"top level must be a mapping, got {type(data).__name__}")
    return data


class _SettingsFileSource(PydanticBaseSettingsSource):
    """Values from the file named by `config`, as already resolved by the higher-priority sources.

    Keys may be written as field names (`probe_port`) or flag names (`probe-port`).
    """

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        # Unused: __call__ returns the whole mapping at once.
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        raw_path = self.current_state.get("config")
        if not raw_path:
            return {}
        data = load_mapping_file(Path(raw_path))
        return {str(key).replace("-", "_"): value for key, value in data.items()}


class AgentSettings(BaseSettings):
    """Flags shared by every gpuop agent (architecture.md section 2)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        cli_exit_on_error=False,
        validate_default=True,
    )

    host_root: Path = Field(
        Path("/"), description="Host filesystem root the agent reads devices from (sysfs, /dev)."
    )
    node_name: str = Field(
        "", description="Name of the Kubernetes node this agent runs on; empty means env NODE_NAME."
    )
    kubeconfig: Path | None = Field(
        None, description="Kubeconfig file; default: in-cluster config, then KUBECONFIG/~/.kube/config."
    )
    config: Path | None = Field(None, description="Settings file (YAML or JSON); CLI and env win over it.")
    once: bool = Field(False, description="Do one pass of the main loop and exit.")
    interval: float = Field(
        30.0, gt=0, le=86400, description="Seconds between passes of the main loop (services may override)."
    )
    dry_run: bool = Field(False, description="Compute and log changes without writing them.")
    log_level: LogLevel = Field("info", description="Minimum level of log records to emit.")
    bind_address: str = Field(
        "0.0.0.0",
        description="IP address every HTTP listener of this agent binds to (probes, metrics).",
    )
    probe_port: int = Field(8081, ge=0, le=65535, description="Port of /healthz, /readyz (0 = any free).")

    @field_validator("node_name")
    @classmethod
    def _node_name_from_downward_api(cls, value: str) -> str:
        # Pods get NODE_NAME from the downward API (spec.nodeName); GPUOP_NODE_NAME or the flag win.
        return value or os.environ.get("NODE_NAME", "")

    @field_validator("bind_address")
    @classmethod
    def _bind_address_is_ip(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError as exc:
            raise ValueError(f"{value!r} is not an IP address") from exc
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file source comes last so it sees `config` as set by CLI, init kwargs or env.
        return (init_settings, env_settings, _SettingsFileSource(settings_cls))


class ConfigFileAgentSettings(AgentSettings):
    """An agent that reads its DeviceConfig section from the chart's ConfigMap, mounted as a file
    (gpuop_common.configfile.ConfigFileWatcher: its node's key, hot-reloaded)."""

    config_file: Path = Field(
        Path("/etc/gpuop/config.yaml"),
        description="The service's ConfigMap file (its DeviceConfig section), hot-reloaded.",
    )
    config_poll_interval: float = Field(5.0, gt=0, description="Seconds between checks of --config-file.")


def _flag_for(loc: Sequence[int | str]) -> str:
    parts = [str(part) for part in loc if isinstance(part, str)]
    return "--" + ".".join(part.replace("_", "-") for part in parts)


def _env_for(loc: Sequence[int | str]) -> str:
    parts = [str(part) for part in loc if isinstance(part, str)]
    return ENV_PREFIX + "__".join(part.upper() for part in parts)


def describe_validation_error(exc: ValidationError) -> str:
    """One line per bad field: `--probe-port (GPUOP_PROBE_PORT): <reason> (got 'abc')`."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = error["loc"]
        if error["type"] == "extra_forbidden":
            lines.append(f"unknown setting {'.'.join(str(part) for part in loc)!r}")
            continue
        field = f"{_flag_for(loc)} ({_env_for(loc)})" if loc else "settings"
        got = f" (got {error['input']!r})" if error["type"] != "missing" and "input" in error else ""
        lines.append(f"invalid {field}: {error['msg']}{got}")
    return "; ".join(lines)


def _usage_error(prog: str, message: str) -> NoReturn:
    print(f"{prog}: error: {message}", file=sys.stderr)
    raise SystemExit(USAGE_ERROR_EXIT_CODE)


def parse_settings(settings_cls: type[S], argv: Sequence[str] | None = None, prog: str | None = None) -> S:
    """Build `settings_cls` from argv (default: sys.argv[1:]), env and the settings file.

    `--help` prints usage and exits 0; any invalid input prints one `prog: error: ...` line naming the
    field and exits 2.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    prog_name = prog or Path(sys.argv[0]).name or "gpuop"
    cli_source: CliSettingsSource[S] = CliSettingsSource(
        settings_cls,
        cli_prog_name=prog_name,
        cli_exit_on_error=False,
        cli_kebab_case=True,
        cli_implicit_flags=True,
        cli_hide_none_type=True,
        cli_show_env_vars=True,
    )
    try:
        return settings_cls(_cli_settings_source=cli_source(args=args))
    except ValidationError as exc:
        _usage_error(prog_name, describe_validation_error(exc))
    except SettingsFileError as exc:
        _usage_error(prog_name, str(exc))
    except SettingsError as exc:
        # argparse problems (unknown flag, missing value) and env values that are not valid JSON.
        message = str(exc).removeprefix("error parsing CLI: ")
        _usage_error(prog_name, message)
