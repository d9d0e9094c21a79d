"""`gpuop-sim serve` as a user runs it: a subprocess, its JSON line, real kubectl, SIGTERM."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from gpuop_sim.binaries import find_binary
from gpuop_sim.shortpaths import short_tmp_dir

GPUOP_SIM = Path(sys.executable).parent / "gpuop-sim"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # Node roots hold unix sockets: keep the path far below the 107-byte limit.
    path = short_tmp_dir("gs-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_serve_prints_ready_line_kubectl_lists_nodes_and_sigterm_exits_cleanly(short_dir: Path) -> None:
    kubeconfig = short_dir / "kc"
    proc = subprocess.Popen(
        [
            str(GPUOP_SIM),
            "serve",
            "--amd-nodes",
            "2",
            "--nvidia-nodes",
            "1",
            "--pods",
            "process",
            "--kubeconfig",
            str(kubeconfig),
            "--state-dir",
            str(short_dir / "state"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        ready = json.loads(line)
        assert ready["kubeconfig"] == str(kubeconfig)
        assert ready["url"] == f"http://127.0.0.1:{ready['port']}"
        assert set(ready["nodes"]) == {"amd-0", "amd-1", "nvidia-0"}
        for root in ready["nodes"].values():
            assert Path(root).is_dir()

        kubectl = find_binary("kubectl")
        listed = subprocess.run(
            [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "nodes", "-o", "name"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert listed.returncode == 0, listed.stderr
        assert sorted(listed.stdout.split()) == ["node/amd-0", "node/amd-1", "node/nvidia-0"]
        children = psutil.Process(proc.pid).children(recursive=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=60)
    assert code == 0
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["serve", "--amd-nodes", "-1"], "must be 0 or more"),
        (["serve", "--pods", "docker"], "invalid choice"),
        (["serve", "--profiles", "amd-mi999"], "unknown profile(s) amd-mi999"),
        (["serve", "--port", "70000"], "not a TCP port"),
        ([], "COMMAND"),
    ],
)
def test_bad_arguments_exit_2_with_a_clear_message(args: list[str], message: str) -> None:
    done = subprocess.run([str(GPUOP_SIM), *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert message in done.stderr


def test_help_describes_serve() -> None:
    done = subprocess.run(
        [str(GPUOP_SIM), "serve", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0
    for flag in ("--amd-nodes", "--nvidia-nodes", "--pods", "--kubeconfig", "--state-dir", "--port"):
        assert flag in done.stdout


def test_no_driver_flag_starts_gpu_nodes_without_a_driver() -> None:
    from gpuop_sim.cli import build_parser, cluster_from_args

    assert cluster_from_args(build_parser().parse_args(["serve", "--no-driver"])).driver_loaded is False
    assert cluster_from_args(build_parser().parse_args(["serve"])).driver_loaded is True


def test_join_needs_the_clusters_kubeconfig_and_runs_no_control_plane(tmp_path: Path) -> None:
    from gpuop_sim.cli import build_parser, joined_from_args

    with pytest.raises(SystemExit) as error:
        build_parser().parse_args(["join", "--amd-nodes", "1"])
    assert error.value.code == 2
    args = build_parser().parse_args(
        [
            "join",
            "--kubeconfig",
            "kc",
            "--amd-nodes",
            "1",
            "--name-prefix",
            "sim-",
            "--state-dir",
            str(tmp_path),
        ]
    )
    joined = joined_from_args(args)
    assert joined.control_plane is False
    assert joined.kubeconfig == Path("kc").resolve()  # absolute: containers run in their own folder
    assert joined.profiles == ["amd-mi300x-cpx"]


def test_break_gpu_makes_one_gpu_unhealthy_and_names_bad_input(tmp_path: Path) -> None:
    from gpuop_sim.nodes import build_node_root
    from gpuop_sim.nodes.faults import active_faults

    info = build_node_root("amd-mi300x-spx", tmp_path / "root")
    gpu = info.pci_addresses[0]
    done = subprocess.run(
        [str(GPUOP_SIM), "break-gpu", "--root", str(info.root), gpu], capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"kind": "ras"' in done.stdout and [f.gpu for f in active_faults(info.root)] == [gpu]
    for bad, message in (
        (["0000:ff:00.0"], "0000:ff:00.0"),  # no such GPU on the node
        ([gpu, "--kind", "melted"], "invalid choice"),
    ):
        done = subprocess.run(
            [str(GPUOP_SIM), "break-gpu", "--root", str(info.root), *bad], capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode != 0 and message in done.stderr, done.stderr


def test_a_grace_period_shorter_than_two_lease_renewals_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Every live node would go Unknown between two heartbeats (kube-controller-manager's rule)."""
    from gpuop_sim import cli

    with pytest.raises(SystemExit) as refused:
        cli.main(["serve", "--node-monitor-grace-period", "3"])
    assert refused.value.code == 2
    assert "--node-monitor-grace-period 3 is shorter than two node Lease renewals" in capsys.readouterr().err
