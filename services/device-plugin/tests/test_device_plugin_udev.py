"""udev is only a hint: without pyudev (or netlink) the plugin falls back to polling."""

from __future__ import annotations

import sys

import pytest
from gpuop_device_plugin.udev import UdevWatcher


def test_without_pyudev_the_watcher_reports_polling_only(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pyudev", None)  # import pyudev now raises ImportError
    watcher = UdevWatcher(lambda: None)
    with caplog.at_level("INFO"):
        assert watcher.start() is False
    assert "relying on polling" in caplog.text
    watcher.stop()  # harmless when never started
