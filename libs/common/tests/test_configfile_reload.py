"""ConfigFileWatcher over a ConfigMap-style mount (..data symlink swap): reload, bad edits, missing file."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest
from gpuop_common.config import DevicePluginConfig
from gpuop_common.configfile import ConfigFileError, ConfigFileWatcher, load_config
from gpuop_common.shutdown import Stopping


class ConfigMapMount:
    """Writes files the way the kubelet updates a mounted ConfigMap: new dir, then swap `..data`."""

    def __init__(self, root: Path, key: str = "config.yaml") -> None:
        self.root = root
        self.key = key
        self.generation = 0
        root.mkdir(parents=True, exist_ok=True)

    @property
    def path(self) -> Path:
        return self.root / self.key

    def publish(self, content: str) -> None:
        self.generation += 1
        version = self.root / f"..2026_12_02_00_00_{self.generation:02d}"
        version.mkdir()
        (version / self.key).write_text(content)
        tmp_link = self.root / "..data_tmp"
        tmp_link.symlink_to(version.name)
        os.replace(tmp_link, self.root / "..data")
        if not self.path.is_symlink():
            self.path.symlink_to(f"..data/{self.key}")


class Recorder:
    def __init__(self) -> None:
        self.seen: list[DevicePluginConfig] = []
        self.changed = threading.Event()

    def __call__(self, config: DevicePluginConfig) -> None:
        self.seen.append(config)
        self.changed.set()


def test_reload_on_symlink_swap(tmp_path: Path) -> None:
    mount = ConfigMapMount(tmp_path / "config")
    mount.publish("migStrategy: single\n")
    recorder = Recorder()
    watcher = ConfigFileWatcher(mount.path, DevicePluginConfig, recorder)

    assert watcher.poll() is True
    assert watcher.current is not None and watcher.current.mig_strategy == "single"
    assert watcher.poll() is False  # unchanged content: no callback

    mount.publish("migStrategy: mixed\ncdi: true\n")
    assert watcher.poll() is True
    assert [c.mig_strategy for c in recorder.seen] == ["single", "mixed"]
    assert watcher.current.cdi is True
    assert watcher.error is None


def test_same_config_in_new_bytes_does_not_fire(tmp_path: Path) -> None:
    mount = ConfigMapMount(tmp_path / "config")
    mount.publish("migStrategy: single\n")
    recorder = Recorder()
    watcher = ConfigFileWatcher(mount.path, DevicePluginConfig, recorder)
    watcher.poll()
    mount.publish("# reformatted\nmig_strategy: single\n")
    assert watcher.poll() is False
    assert len(recorder.seen) == 1


def test_bad_edit_keeps_last_good_and_names_file_and_field(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    mount = ConfigMapMount(tmp_path / "config")
    mount.publish("migStrategy: single\n")
    recorder = Recorder()
    watcher = ConfigFileWatcher(mount.path, DevicePluginConfig, recorder)
    watcher.poll()

    mount.publish("migStrategy: sometimes\n")
    with caplog.at_level(logging.ERROR, logger="gpuop_common.configfile"):
        assert watcher.poll() is False
        assert watcher.poll() is False  # the same bad content is reported once, not every poll
    assert watcher.current is not None and watcher.current.mig_strategy == "single"
    assert watcher.error is not None
    assert str(mount.path) in watcher.error
    assert "migStrategy" in watcher.error
    errors = [r for r in caplog.records if r.name == "gpuop_common.configfile"]
    assert len(errors) == 1
    assert "migStrategy" in errors[0].error  # type: ignore[attr-defined]

    mount.publish("migStrategy: [unclosed\n")
    watcher.poll()
    assert "not valid YAML" in (watcher.error or "")

    mount.publish("migStrategy: none\n")
    assert watcher.poll() is True
    assert watcher.error is None
    assert [c.mig_strategy for c in recorder.seen] == ["single", "none"]


def test_missing_file_uses_default_and_reports(tmp_path: Path) -> None:
    default = DevicePluginConfig()
    watcher = ConfigFileWatcher(tmp_path / "absent.yaml", DevicePluginConfig, Recorder(), default=default)
    assert watcher.poll() is False
    assert watcher.current == default
    assert watcher.error is not None and "missing" in watcher.error


def test_handler_failure_does_not_stop_the_watcher(tmp_path: Path) -> None:
    mount = ConfigMapMount(tmp_path / "config")
    mount.publish("cdi: true\n")

    def broken(_config: DevicePluginConfig) -> None:
        raise RuntimeError("handler bug")

    watcher = ConfigFileWatcher(mount.path, DevicePluginConfig, broken)
    assert watcher.poll() is True
    assert watcher.current is not None and watcher.current.cdi is True


def test_background_thread_picks_up_changes_and_stops(tmp_path: Path) -> None:
    mount = ConfigMapMount(tmp_path / "config")
    mount.publish("cdi: false\n")
    recorder = Recorder()
    stopping = Stopping()
    watcher = ConfigFileWatcher(mount.path, DevicePluginConfig, recorder, interval=0.02)
    thread = watcher.start_in_thread(stopping)
    try:
        assert recorder.changed.wait(5)
        recorder.changed.clear()
        mount.publish("cdi: true\n")
        assert recorder.changed.wait(5)
        assert recorder.seen[-1].cdi is True
    finally:
        stopping.set()
        thread.join(5)
    assert not thread.is_alive()


def test_load_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError, match=r"absent\.json"):
        load_config(tmp_path / "absent.json", DevicePluginConfig)
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n")
    with pytest.raises(ConfigFileError, match="mapping"):
        load_config(listing, DevicePluginConfig)
    bad = tmp_path / "bad.json"
    bad.write_text('{"health": {"pollIntervalSeconds": 0}}')
    with pytest.raises(ConfigFileError, match=r"health\.pollIntervalSeconds"):
        load_config(bad, DevicePluginConfig)


def test_load_starts_from_the_file_without_calling_back(tmp_path: Path) -> None:
    mount = ConfigMapMount(tmp_path / "config")
    mount.publish("migStrategy: single\n")
    recorder = Recorder()
    watcher = ConfigFileWatcher.load(mount.path, DevicePluginConfig, on_change=recorder)
    assert watcher.config.mig_strategy == "single"
    assert watcher.error is None
    assert watcher.poll() is False  # the same content is no change
    mount.publish("migStrategy: mixed\n")
    assert watcher.poll() is True
    assert [c.mig_strategy for c in recorder.seen] == ["mixed"]


def test_load_of_an_absent_file_is_the_default_and_no_error_until_it_appears(tmp_path: Path) -> None:
    watcher = ConfigFileWatcher.load(tmp_path / "config" / "config.yaml", DevicePluginConfig)
    assert watcher.config == DevicePluginConfig()
    assert watcher.error is None
    recorder = Recorder()
    watcher.set_on_change(recorder)
    mount = ConfigMapMount(tmp_path / "config")
    mount.publish("cdi: true\n")
    assert watcher.poll() is True
    assert recorder.seen[-1].cdi is True
    # The optional ConfigMap is deleted again: the config in force stays, still no error.
    (mount.path).unlink()
    assert watcher.poll() is False
    assert watcher.config.cdi is True and watcher.error is None


def test_load_of_a_bad_file_is_the_default_with_the_error_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("health: {pollIntervalSeconds: 0}\n")
    default = DevicePluginConfig(cdi=True)
    with caplog.at_level(logging.ERROR, logger="gpuop_common.configfile"):
        watcher = ConfigFileWatcher.load(path, DevicePluginConfig, default=default)
        watcher.poll()
    assert watcher.config == default
    assert watcher.error is not None and "health.pollIntervalSeconds" in watcher.error
    assert len([r for r in caplog.records if r.levelno == logging.ERROR]) == 1
    path.write_text("cdi: false\n")
    assert watcher.poll() is True
    assert watcher.error is None and watcher.config.cdi is False


def test_unreadable_file_reports_its_error_rather_than_missing(tmp_path: Path) -> None:
    directory = tmp_path / "config.yaml"
    directory.mkdir()  # reading a directory fails with an OSError other than "not found"
    watcher = ConfigFileWatcher.load(directory, DevicePluginConfig)
    assert watcher.error is not None and "missing" not in watcher.error
    assert str(directory) in watcher.error


def test_config_of_a_watcher_without_default_needs_a_good_file(tmp_path: Path) -> None:
    watcher = ConfigFileWatcher(tmp_path / "absent.yaml", DevicePluginConfig)
    with pytest.raises(RuntimeError, match="no default"):
        _ = watcher.config


def publish_keys(root: Path, generation: int, data: dict[str, str]) -> None:
    """A whole ConfigMap (several keys) published the kubelet's way: one new dir, one `..data` swap."""
    root.mkdir(parents=True, exist_ok=True)
    version = root / f"..2026_12_03_00_00_{generation:02d}"
    version.mkdir()
    for key, content in data.items():
        (version / key).write_text(content)
    tmp_link = root / "..data_tmp"
    tmp_link.symlink_to(version.name)
    os.replace(tmp_link, root / "..data")
    for key in data:
        if not (root / key).is_symlink():
            (root / key).symlink_to(f"..data/{key}")


def test_a_node_reads_the_settings_of_the_deviceconfig_holding_it(tmp_path: Path) -> None:
    mount = tmp_path / "config"
    shared = {"config.yaml": "migStrategy: none\n"}
    publish_keys(mount, 1, shared)
    on_amd = ConfigFileWatcher(mount / "config.yaml", DevicePluginConfig, node_name="amd-0")
    on_cpu = ConfigFileWatcher(mount / "config.yaml", DevicePluginConfig, node_name="cpu-0")
    standalone = ConfigFileWatcher(mount / "config.yaml", DevicePluginConfig)
    for watcher in (on_amd, on_cpu, standalone):
        assert watcher.poll() and watcher.config.mig_strategy == "none"  # no nodes.yaml yet
    # The operator adds a key per DeviceConfig and the node map; each watcher follows its node.
    publish_keys(
        mount,
        2,
        {
            **shared,
            "gpu-operator.amd.yaml": "migStrategy: single\n",
            "gpu-operator.nvidia.yaml": "migStrategy: mixed\n",
            "nodes.yaml": "amd-0: gpu-operator.amd.yaml\nnvidia-0: gpu-operator.nvidia.yaml\n",
        },
    )
    assert on_amd.poll() and on_amd.config.mig_strategy == "single"
    assert on_amd.source == mount / "gpu-operator.amd.yaml"
    assert not on_cpu.poll() and on_cpu.source == mount / "config.yaml"  # held by none: shared file
    assert not standalone.poll()
    # The node moves to the other DeviceConfig: the next poll follows it.
    publish_keys(
        mount,
        3,
        {
            **shared,
            "gpu-operator.amd.yaml": "migStrategy: single\n",
            "gpu-operator.nvidia.yaml": "migStrategy: mixed\n",
            "nodes.yaml": "amd-0: gpu-operator.nvidia.yaml\n",
        },
    )
    assert on_amd.poll() and on_amd.config.mig_strategy == "mixed"


@pytest.mark.parametrize(
    "bad_map",
    [
        "amd-0: [not, a, key]\n",  # not a string
        "amd-0: ../../etc/passwd.yaml\n",  # a path, not a key of this ConfigMap
        "amd-0: missing.yaml\n",  # names no file
        "{unclosed\n",  # not YAML
        "- a list\n",  # not a mapping
    ],
)
def test_a_bad_node_map_falls_back_to_the_shared_file(tmp_path: Path, bad_map: str) -> None:
    mount = tmp_path / "config"
    publish_keys(mount, 1, {"config.yaml": "migStrategy: single\n", "nodes.yaml": bad_map})
    watcher = ConfigFileWatcher(mount / "config.yaml", DevicePluginConfig, node_name="amd-0")
    assert watcher.poll() and watcher.config.mig_strategy == "single"
    assert watcher.source == mount / "config.yaml"
