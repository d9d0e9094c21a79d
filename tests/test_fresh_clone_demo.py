"""The README's first command on a user's fresh clone (issue 27), and gpuop-sim from its wheel.

A user's `git clone` has no `shared/` beside it (only the developers' and CI's checkouts do), and
an installed wheel has no checkout at all. Both must still serve the OpenAPI documents helm and
kubectl validate against. The clone runs the real `make demo` (its own `make install` included),
so this is also the timing every new user meets.
"""

from __future__ import annotations

import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from gpuop_sim.shortpaths import short_tmp_dir

ROOT = Path(__file__).resolve().parents[1]
UV = ROOT / ".tools" / "bin" / "uv"
READY_ROW = re.compile(r"^│ amd-0 .*stage=ready", re.MULTILINE)

pytestmark = pytest.mark.slow


def user_env() -> dict[str, str]:
    """This machine's environment as a user's shell has it: nothing of this checkout's make or venv."""
    inherited = ("VIRTUAL_ENV", "GPUOP_SHARED_DIR", "GPUOP_BIN_DIR", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    env = {k: v for k, v in os.environ.items() if k not in inherited and not k.startswith("UV_")}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not p.startswith(str(ROOT)))
    return env


def git_clone(dest: Path) -> Path:
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(ROOT), str(dest)], check=True)
    assert not (dest.parent / "shared").exists()
    return dest


def stop_demo(make: subprocess.Popen[str]) -> None:
    """Ctrl-C for the demo process itself (not make), which then stops its cluster and exits 0."""
    for child in psutil.Process(make.pid).children(recursive=True):
        if "gpuop_sim.demo" in " ".join(child.cmdline()):
            child.send_signal(signal.SIGINT)


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder other users can enter, as a user's checkout is: the demo's containers run as their
    image's user (65532) and read the clone's .venv (pytest's own tmp_path is 0700)."""
    path = short_tmp_dir("clone-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.timeout(660)  # its own make install included, on 2 busy cores
def test_make_demo_on_a_fresh_clone_installs_the_chart_and_a_node_reaches_ready(open_dir: Path) -> None:
    clone = git_clone(open_dir / "gpuop")
    args = "--amd-nodes 1 --nvidia-nodes 0 --no-partition --no-break --no-live --duration 400"
    started = time.monotonic()
    make = subprocess.Popen(
        ["make", "demo", f"DEMO_ARGS={args}"],
        cwd=clone,
        env=user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert make.stdout is not None
    out: list[str] = []
    ready_after: float | None = None
    with selectors.DefaultSelector() as selector:
        selector.register(make.stdout, selectors.EVENT_READ)
        while make.poll() is None and time.monotonic() - started < 540:
            if selector.select(timeout=1.0):
                line = make.stdout.readline()
                out.append(line)
                if ready_after is None and READY_ROW.search(line):
                    ready_after = time.monotonic() - started
                    stop_demo(make)
    if make.poll() is None:
        make.kill()
    rest, _ = make.communicate(timeout=60)
    text = "".join(out) + rest
    assert "Cannot install" not in text, text[-4000:]
    assert "Installed gpu-operator into namespace gpu-operator" in text, text[-4000:]
    assert ready_after is not None, text[-4000:]
    assert make.returncode == 0, text[-4000:]
    print(f"fresh clone: make demo reached stage=ready after {ready_after:.0f} s (install included)")


def test_gpuop_sim_wheel_in_a_fresh_venv_serves_openapi(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    sources = tomllib.loads((ROOT / "libs/sim/pyproject.toml").read_text())["tool"]["uv"]["sources"]
    workspace = [name for name, source in sources.items() if source.get("workspace")]
    for package in (*workspace, "gpuop-sim"):  # its workspace dependencies are on no registry
        subprocess.run(
            [str(UV), "build", "--quiet", "--wheel", "--package", package, "--out-dir", str(dist)],
            cwd=ROOT,
            env=user_env(),
            check=True,
        )
    venv = tmp_path / "venv"
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    subprocess.run(
        [
            str(UV),
            "pip",
            "install",
            "--quiet",
            "--python",
            str(python),
            *map(str, sorted(dist.glob("*.whl"))),
        ],
        env=user_env(),
        check=True,
    )
    probe = """
import json, urllib.request, gpuop_sim
from gpuop_sim.apiserver import SimApiServer
print(gpuop_sim.__file__)
with SimApiServer(controllers=False) as srv:
    index = json.loads(urllib.request.urlopen(srv.url + "/openapi/v3", timeout=10).read())
    url = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
    apps = json.loads(urllib.request.urlopen(srv.url + url, timeout=10).read())
    print(len(index["paths"]), "io.k8s.api.apps.v1.DaemonSet" in apps["components"]["schemas"])
"""
    done = subprocess.run(
        [str(python), "-c", probe], cwd=tmp_path, env=user_env(), capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    where, served = done.stdout.split("\n")[:2]
    assert where.startswith(str(venv)), where  # the wheel's copy, not this checkout
    count, has_daemonset = served.split()
    assert int(count) >= 16 and has_daemonset == "True", done.stdout
