"""`gpuop-config-manager` entry point: bad input is one clear line and an exit code, `--once` runs a pass."""

from __future__ import annotations

from pathlib import Path

import pytest
from gpuop_config_manager.main import main
from kubernetes import client


def test_no_node_name_is_exit_2(monkeypatch, capsys):
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("GPUOP_NODE_NAME", raising=False)
    assert main(["--once", "--probe-port=0"]) == 2


@pytest.mark.parametrize(("flag", "field"), [("--interval=0", "interval"), ("--poll-seconds=-1", "poll")])
def test_bad_flags_name_the_field(flag, field, capsys):
    with pytest.raises(SystemExit) as excinfo:
        main([flag])
    assert excinfo.value.code == 2
    assert field in capsys.readouterr().err


def test_once_applies_the_profile_from_the_config_file(
    gpu_node_root, sim_kubeconfig, kube_api_client, monkeypatch, tmp_path: Path
):
    info = gpu_node_root("amd-mi300x-spx", "gpu-node")
    for key, value in info.env.items():
        monkeypatch.setenv(key, value)
    labels = {"gpuop.dev/gpu-config-profile": "qpx"}
    client.CoreV1Api(kube_api_client).create_node(
        client.V1Node(metadata=client.V1ObjectMeta(name="gpu-node", labels=labels))
    )
    config = tmp_path / "config.yaml"
    config.write_text("profiles:\n  - name: qpx\n    amd: {computePartition: QPX, memoryPartition: NPS1}\n")
    args = ["--once", "--probe-port=0", "--node-name=gpu-node", f"--kubeconfig={sim_kubeconfig}"]
    assert main([*args, f"--config-file={config}", f"--host-root={info.root}"]) == 0
    node = client.CoreV1Api(kube_api_client).read_node("gpu-node")
    assert node.metadata.labels["gpuop.dev/gpu-config-state"] == "success"
    # A profile the GPUs refuse: --once exits 1 and the reason is on the node.
    config.write_text("profiles:\n  - name: qpx\n    amd: {computePartition: SPX, memoryPartition: NPS4}\n")
    assert main([*args, f"--config-file={config}", f"--host-root={info.root}"]) == 1
    node = client.CoreV1Api(kube_api_client).read_node("gpu-node")
    assert "SPX is refused" in node.metadata.annotations["gpuop.dev/gpu-config-failure-reason"]
