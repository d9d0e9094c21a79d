"""gpuop_common.config imports its submodules on first use, and every public name still resolves."""

from __future__ import annotations

import subprocess
import sys

import pytest
from gpuop_common import config


def test_every_public_name_resolves_to_its_submodules_object() -> None:
    for name in config.__all__:
        value = getattr(config, name)
        defining = sys.modules[f"gpuop_common.config.{config._SUBMODULE_OF[name]}"]
        assert value is getattr(defining, name), name
    assert set(config.__all__) <= set(dir(config))


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchConfig"):
        _ = config.NoSuchConfig
    with pytest.raises(ImportError):
        exec("from gpuop_common.config import NoSuchConfig", {})


def test_an_agent_builds_only_its_own_section() -> None:
    probe = (
        "import sys\n"
        "from gpuop_common.config import DevicePluginConfig\n"
        "DevicePluginConfig()\n"
        "print(sorted(m for m in sys.modules if m.startswith('gpuop_common.config.')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = done.stdout.strip()
    expected = [
        "gpuop_common.config.base",
        "gpuop_common.config.device_plugin",
        "gpuop_common.config.sharing",
    ]
    assert loaded == str(expected), loaded
