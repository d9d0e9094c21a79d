"""Build every service's image with buildah, check each with a real OCI runtime, optionally archive it.

    python tools/images.py [--base IMAGE] [--archives DIR] [--only SERVICE ...]

Each `services/<name>/Dockerfile` is built with `buildah bud --isolation chroot` into vfs storage (no
daemon, no overlay mounts) as `gpuop/gpuop-<name>:<VERSION>`, the charts' repository, with the OCI
labels filled (version, git revision, source). Then podman runs it with runc as the image's own
USER: the entrypoint's `--help` must exit 0. The table at the end gives each image's size, user and
build time.

The Dockerfiles take two bases: `BUILD_IMAGE` for the stage that installs the venv with uv, and
`BASE_IMAGE` for the image itself (both default to `python:3.11-slim`, which a release uses:
`--base python:3.11-slim`). Without `--base` the public image is not pulled (no registry is reachable
on CI's machine): one Debian bookworm root (debootstrap, Debian's python3 3.11 and python3-venv) is
made once, cached under `.cache/`, and imported twice: whole as `localhost/gpuop-base:bookworm` (the
build stage's), and trimmed as `localhost/gpuop-base:bookworm-slim` (no venv/pip wheels, apt lists,
docs, man pages or locales: the images' own, which keeps the agents small). docs/images.md says how
a release uses the public base.
Needs root; buildah, podman, runc and debootstrap are installed through apt when missing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from gpuop_sim import apt_tools

REPO = Path(__file__).resolve().parents[1]

TOOLS = {"buildah": "buildah", "podman": "podman", "runc": "runc", "debootstrap": "debootstrap"}
LOCAL_BASE = "localhost/gpuop-base:bookworm-slim"
# The whole root, for the build stage; the tag the single local base of earlier builds had.
LOCAL_BUILD_BASE = "localhost/gpuop-base:bookworm"
BASE_ROOT = REPO / ".cache/gpuop-base-bookworm"
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
# What the runtime base leaves out of the root (tar --exclude patterns, relative to it): what only
# the build stage needs (venv's pip and setuptools wheels, apt's lists) and what no program in the
# images reads (docs, man and info pages, translations; Python's own codecs replace glibc's gconv).
RUNTIME_EXCLUDES = (
    "./usr/share/doc/*",
    "./usr/share/man/*",
    "./usr/share/info/*",
    "./usr/share/locale/*",
    "./usr/share/lintian/*",
    "./usr/share/python-wheels/*",
    "./usr/lib/python3.11/ensurepip",
    "./usr/lib/x86_64-linux-gnu/gconv/*",
    "./var/lib/apt/lists/*",
    "./var/cache/apt/*",
    "./var/cache/debconf/*-old",
    "./var/log/*",
)
# The same paths stay out of packages apt installs later in the runtime stage (dpkg's own filter,
# as Debian's slim images do); copyright files stay.
DPKG_EXCLUDES = """path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/lintian/*
"""
MIRROR = "http://deb.debian.org/debian"
STORAGE = ("--storage-driver", "vfs")
# Raising rlimits needs CAP_SYS_RESOURCE, which sandboxed machines drop (gpuop_sim.oci says more).
LIMITS = ("--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024")


@dataclass(frozen=True)
class Built:
    service: str
    reference: str
    seconds: float
    size_mb: float
    user: str


def run(*command: str, capture: bool = False) -> str:
    done = subprocess.run(command, check=False, text=True, capture_output=capture)
    if done.returncode != 0:
        detail = (done.stderr or "")[-3000:] if capture else ""
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}) {detail}")
    return done.stdout if capture else ""


def services() -> list[str]:
    return sorted(p.parent.name for p in (REPO / "services").glob("*/Dockerfile"))


def image_exists(reference: str) -> bool:
    done = subprocess.run(["podman", *STORAGE, "image", "exists", reference], check=False)
    return done.returncode == 0


def local_base() -> str:
    """The Debian bookworm base, debootstrapped once into .cache and imported once into storage."""
    marker = BASE_ROOT / ".gpuop-complete"
    if not marker.is_file():
        building = BASE_ROOT.with_name(BASE_ROOT.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        shutil.rmtree(BASE_ROOT, ignore_errors=True)
        run(
            "debootstrap",
            "--variant=minbase",
            f"--include={BASE_PACKAGES}",
            "bookworm",
            str(building),
            MIRROR,
        )
        run("chroot", str(building), "apt-get", "clean")
        shutil.rmtree(building / "var/lib/apt/lists", ignore_errors=True)
        (building / "var/lib/apt/lists/partial").mkdir(parents=True)
        (building / ".gpuop-complete").write_text(f"bookworm {BASE_PACKAGES}\n")
        building.rename(BASE_ROOT)
        for reference in (LOCAL_BASE, LOCAL_BUILD_BASE):
            subprocess.run(["podman", *STORAGE, "rmi", "-f", reference], check=False, capture_output=True)
    for reference, excludes in ((LOCAL_BUILD_BASE, ()), (LOCAL_BASE, RUNTIME_EXCLUDES)):
        if not image_exists(reference):
            _trust_local_cas(BASE_ROOT)
            (BASE_ROOT / "etc/dpkg/dpkg.cfg.d/gpuop-slim").write_text(DPKG_EXCLUDES)
            _import_root(BASE_ROOT, reference, excludes)
    return LOCAL_BASE


def local_build_base() -> str:
    """The build stage's base beside `local_base()`: the same root with python3-venv for uv."""
    local_base()
    return LOCAL_BUILD_BASE


def _import_root(root: Path, reference: str, excludes: tuple[str, ...]) -> None:
    excluding = [f"--exclude={pattern}" for pattern in (*excludes, "./.gpuop-complete")]
    tar = subprocess.Popen(["tar", "-C", str(root), *excluding, "-c", "."], stdout=subprocess.PIPE)
    # pip's and uv's own CA bundles would not hold those CAs: point them at the system store.
    trust = [
        f"--change=ENV {name}=/etc/ssl/certs/ca-certificates.crt" for name in ("SSL_CERT_FILE", "PIP_CERT")
    ]
    importing = ["podman", *STORAGE, "import", *trust, "-", reference]
    subprocess.run(importing, stdin=tar.stdout, check=True, capture_output=True)
    if tar.wait() != 0:
        raise SystemExit(f"images: tar of {root} failed ({tar.returncode})")


def _trust_local_cas(root: Path) -> None:
    """The build machine's own CAs (an egress proxy's, as on CI) into the local base, so the build
    stage reaches PyPI and Debian through it. Local bases only: a release base is the public image."""
    local = Path("/usr/local/share/ca-certificates")
    target = root / "usr/local/share/ca-certificates"
    for cert in local.glob("*.crt"):
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cert, target / cert.name)
    run("chroot", str(root), "update-ca-certificates")


def git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(REPO), *args], check=False, text=True, capture_output=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def build(service: str, base: str, version: str, build_base: str | None = None) -> Built:
    """`gpuop/gpuop-<service>:<version>` on `base`, its venv made on `build_base`: by default `base`
    itself, or the whole local root where `base` is the local slim base (it has no venv module)."""
    build_base = build_base or (LOCAL_BUILD_BASE if base == LOCAL_BASE else base)
    reference = f"gpuop/gpuop-{service}:{version}"
    started = time.monotonic()
    run(
        "buildah", *STORAGE, "bud", "--isolation", "chroot", "--layers",
        "--build-arg", f"BASE_IMAGE={base}",
        "--build-arg", f"BUILD_IMAGE={build_base}",
        "--build-arg", f"VERSION={version}",
        "--build-arg", f"REVISION={git('rev-parse', 'HEAD')}",
        "--build-arg", f"SOURCE={git('remote', 'get-url', 'origin')}",
        "-f", str(REPO / "services" / service / "Dockerfile"),
        "-t", reference, str(REPO),
    )  # fmt: skip
    seconds = time.monotonic() - started
    (info,) = json.loads(run("podman", *STORAGE, "image", "inspect", reference, capture=True))
    return Built(service, reference, seconds, info["Size"] / 1e6, info["Config"].get("User", "") or "root")


def check(built: Built) -> None:
    """The entrypoint's --help exits 0, run by runc as the image's USER (podman's default)."""
    runtime = ("--runtime", "runc", "--cgroup-manager", "cgroupfs", "--events-backend", "none")
    run(
        "podman",
        *STORAGE,
        *runtime,
        "run",
        "--rm",
        "--network",
        "none",
        *LIMITS,
        built.reference,
        "--help",
        capture=True,
    )


def archive(built: Built, directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"gpuop-{built.service}-{built.reference.rsplit(':', 1)[1]}.tar"
    path.unlink(missing_ok=True)
    run("podman", *STORAGE, "save", "--format", "oci-archive", "-o", str(path), built.reference)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", help="base image (default: the local Debian bookworm base)")
    parser.add_argument("--archives", type=Path, help="write an OCI archive of each image here")
    parser.add_argument("--only", nargs="*", default=None, help="these services only")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("images: buildah with vfs storage and runc need root here")
    missing = apt_tools.ensure_tools(TOOLS)
    if missing:
        raise SystemExit(f"images: missing and not installable through apt: {', '.join(missing)}")
    version = (REPO / "VERSION").read_text().strip()
    base = args.base or local_base()
    build_base = args.base or local_build_base()
    rows = []
    for service in args.only or services():
        built = build(service, base, version, build_base)
        check(built)
        saved = archive(built, args.archives) if args.archives else None
        rows.append(built)
        where = f", {saved}" if saved else ""
        print(
            f"images: {built.reference} {built.seconds:.0f} s, {built.size_mb:.0f} MB, --help ok{where}",
            flush=True,
        )
    print(f"{'image':<45} {'MB':>6} {'build s':>8}  user")
    for built in rows:
        print(f"{built.reference:<45} {built.size_mb:>6.0f} {built.seconds:>8.0f}  {built.user}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
