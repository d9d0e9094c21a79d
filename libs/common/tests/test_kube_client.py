"""make_api_client credential order and errors; label_changes (the pure part of patch_node_labels)."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuop_common.kube import KubeConfigError, label_changes, make_api_client

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters:
- name: sim
  cluster: {{server: "{server}"}}
users:
- name: sim
  user: {{token: "t0ken"}}
contexts:
- name: sim
  context: {{cluster: sim, user: sim}}
current-context: sim
"""


@pytest.fixture(autouse=True)
def _no_ambient_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("GPUOP_KUBECONFIG", "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def _write(path: Path, server: str) -> Path:
    path.write_text(KUBECONFIG.format(server=server))
    return path


def test_explicit_kubeconfig_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = _write(tmp_path / "explicit", "http://127.0.0.2:1234")
    monkeypatch.setenv("KUBECONFIG", str(_write(tmp_path / "ambient", "http://127.0.0.3:1")))
    api = make_api_client(explicit)
    assert api.configuration.host == "http://127.0.0.2:1234"


def test_gpuop_kubeconfig_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUOP_KUBECONFIG", str(_write(tmp_path / "env", "http://127.0.0.4:80")))
    assert make_api_client(None).configuration.host == "http://127.0.0.4:80"


def test_falls_back_to_kubeconfig_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(_write(tmp_path / "ambient", "http://127.0.0.5:80")))
    assert make_api_client(None).configuration.host == "http://127.0.0.5:80"


def test_each_client_has_its_own_configuration(tmp_path: Path) -> None:
    first = make_api_client(_write(tmp_path / "a", "http://127.0.0.6:1"))
    second = make_api_client(_write(tmp_path / "b", "http://127.0.0.7:1"))
    assert first.configuration.host != second.configuration.host


def test_no_credentials_lists_what_was_tried() -> None:
    with pytest.raises(KubeConfigError) as raised:
        make_api_client(None)
    message = str(raised.value)
    assert "in-cluster" in message
    assert "~/.kube/config" in message


def test_missing_and_broken_kubeconfig_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="no such file"):
        make_api_client(tmp_path / "absent")
    broken = tmp_path / "broken"
    broken.write_text("apiVersion: v1\nkind: Config\ncontexts: []\n")
    with pytest.raises(KubeConfigError, match=str(broken)):
        make_api_client(broken)


def test_label_changes_only_touches_differing_keys() -> None:
    current = {"keep": "1", "change": "old", "remove": "x", "other-owner": "y"}
    desired = {"keep": "1", "change": "new", "remove": None, "absent": None, "add": "z"}
    assert label_changes(current, desired) == {"change": "new", "remove": None, "add": "z"}
    assert label_changes(current, {"keep": "1"}) == {}
