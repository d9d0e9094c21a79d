"""The cached Debian root is built in the background from the end of collection, and a failed build
fails the tests that need it with the build's own message.

Each case runs an inner pytest session with an empty cache (`GPUOP_CACHE_DIR`) and a `debootstrap`
on PATH that says when it starts, waits for the inner test to let it go, then fails the way a
mirror outage does: the real one is exercised by the playbook tests on the root it builds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the root is built only as root (chroot)")

FAILING_DEBOOTSTRAP = """#!/bin/sh
touch "$GPUOP_TEST_DIR/started"
while [ ! -e "$GPUOP_TEST_DIR/go" ]; do sleep 0.05; done
echo "E: Failed getting release file http://deb.debian.org/debian/dists/bookworm/Release" >&2
exit 1
"""

INNER = """
from pathlib import Path
import os
from gpuop_sim.waiting import wait_until

here = Path(os.environ["GPUOP_TEST_DIR"])

def test_0_runs_while_the_root_builds():
    wait_until(lambda: (here / "started").exists(), timeout=60, what="debootstrap started by the session")
    (here / "go").touch()
"""

NEEDS_ROOT = """
def test_1_needs_the_root(debian_base_root):
    assert (debian_base_root / "etc/debian_version").is_file()  # never reached: the build failed
"""

NO_ROOT_NEEDED = """
from pathlib import Path
import os

def test_nothing_needs_the_root():
    assert not (Path(os.environ["GPUOP_TEST_DIR"]) / "started").exists()
"""


def _inner_session(tmp_path: Path, tests: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "debootstrap"
    fake.write_text(FAILING_DEBOOTSTRAP)
    fake.chmod(0o755)
    (tmp_path / "test_inner.py").write_text(tests)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "GPUOP_CACHE_DIR": str(tmp_path / "cache"),
        "GPUOP_TEST_DIR": str(tmp_path),
    }
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "test_inner.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


@pytest.mark.slow
def test_the_build_starts_at_collection_and_its_failure_fails_the_tests_that_need_the_root(
    tmp_path: Path,
) -> None:
    done = _inner_session(tmp_path, INNER + NEEDS_ROOT)
    assert "1 passed, 1 error" in done.stdout, done.stdout + done.stderr
    # The test that needs the root names the failed build and the mirror's own words.
    assert "building the Debian root (python -m gpuop_sim.debian_root) failed" in done.stdout
    assert "E: Failed getting release file" in done.stdout
    assert not (tmp_path / "cache" / "debian-bookworm-root").exists()


@pytest.mark.slow
def test_no_build_starts_when_no_collected_test_needs_the_root(tmp_path: Path) -> None:
    done = _inner_session(tmp_path, NO_ROOT_NEEDED)
    assert "1 passed" in done.stdout, done.stdout + done.stderr
    assert not (tmp_path / "started").exists()
