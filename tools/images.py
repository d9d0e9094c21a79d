"""Build every service's image with buildah, check each with a real OCI runtime, optionally archive it.

    python tools/images.py [--base IMAGE] [--archives DIR] [--only SERVICE ...]

Each `services/<name>/Dockerfile` is built with `buildah bud --isolation chroot` into vfs storage (no
daemon, no overlay mounts) as `gpuop/gpuop-<name>:<VERSION>`, the charts' repository, with the OCI
labels filled (version, git revision, source). Then podman runs it with runc as the image's own
USER: the entrypoint's `--help` must exit 0. The table at the end gives each image's size, user and
build time. An image whose build inputs (the files its Dockerfile copies, the bases, version and
commit: `build_inputs`) match the label of the image already in storage is not rebuilt, and an
archive of that very image is not rewritten, so a rerun on an unchanged checkout takes seconds.

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
import hashlib
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

TOOLS = {
    "buildah": "buildah",
    "podman": "podman",
    "runc": "runc",
    "skopeo": "skopeo",
    "debootstrap": "debootstrap",
}
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
INPUTS_LABEL = "io.gpuop.build-inputs"
# What every Dockerfile copies from the context (tests/test_workspace_layout.py holds them to it),
# and what .dockerignore leaves out of it.
CONTEXT = ("pyproject.toml", "uv.lock", "tools/slim_venv.py", "libs")
IGNORED_DIRS = {"__pycache__", ".mypy_cache"}
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
    cached: bool = False  # the image in storage already had these build inputs


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


def build_inputs(service: str, bases: tuple[str, ...], build_args: tuple[str, ...]) -> str:
    """sha256 over everything a build of `service` reads: the base images' IDs, the build
    arguments, its Dockerfile and the context files it copies (paths and contents)."""
    digest = hashlib.sha256()
    for part in (*(_image_id(base) for base in bases), *build_args):
        digest.update(part.encode() + b"\0")
    roots = [REPO / name for name in CONTEXT] + [REPO / "services" / service]
    for path in sorted(p for root in roots for p in _files(root)):
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def _files(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return [
        path
        for path in root.rglob("*")
        if path.is_file() and not IGNORED_DIRS.intersection(path.relative_to(root).parts)
    ]


def _image_id(reference: str) -> str:
    done = subprocess.run(
        ["podman", *STORAGE, "image", "inspect", "--format", "{{.Id}}", reference],
        check=False,
        text=True,
        capture_output=True,
    )
    return done.stdout.strip() if done.returncode == 0 else reference


def _label(reference: str, label: str) -> str:
    done = subprocess.run(
        ["podman", *STORAGE, "image", "inspect", reference], check=False, text=True, capture_output=True
    )
    if done.returncode != 0:
        return ""
    (info,) = json.loads(done.stdout)
    return str((info["Config"].get("Labels") or {}).get(label, ""))


def build(service: str, base: str, version: str, build_base: str | None = None) -> Built:
    """`gpuop/gpuop-<service>:<version>` on `base`, its venv made on `build_base`: by default `base`
    itself, or the whole local root where `base` is the local slim base (it has no venv module).
    Not rebuilt when the image in storage was built from the same inputs."""
    build_base = build_base or (LOCAL_BUILD_BASE if base == LOCAL_BASE else base)
    reference = f"gpuop/gpuop-{service}:{version}"
    build_args = (
        f"BASE_IMAGE={base}",
        f"BUILD_IMAGE={build_base}",
        f"VERSION={version}",
        f"REVISION={git('rev-parse', 'HEAD')}",
        f"SOURCE={git('remote', 'get-url', 'origin')}",
    )
    inputs = build_inputs(service, (base, build_base), build_args)
    started = time.monotonic()
    if _label(reference, INPUTS_LABEL) == inputs:
        return _built(service, reference, 0.0, cached=True)
    run(
        # No --layers: vfs commits every cached step as a whole copy of the root, which made a
        # build 85-280 s and seven of them 32 GB; without it a build takes ~20 s and only the
        # images stay. An unchanged image is skipped by its build-inputs label instead.
        "buildah", *STORAGE, "bud", "--isolation", "chroot",
        *(arg for build_arg in build_args for arg in ("--build-arg", build_arg)),
        "--label", f"{INPUTS_LABEL}={inputs}",
        "-f", str(REPO / "services" / service / "Dockerfile"),
        "-t", reference, str(REPO),
    )  # fmt: skip
    return _built(service, reference, time.monotonic() - started)


def _built(service: str, reference: str, seconds: float, *, cached: bool = False) -> Built:
    (info,) = json.loads(run("podman", *STORAGE, "image", "inspect", reference, capture=True))
    user = info["Config"].get("User", "") or "root"
    return Built(service, reference, seconds, info["Size"] / 1e6, user, cached)


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
    if path.is_file() and _archived_id(path) == _image_id(built.reference):
        return path
    path.unlink(missing_ok=True)
    run("podman", *STORAGE, "save", "--format", "oci-archive", "-o", str(path), built.reference)
    return path


def _archived_id(path: Path) -> str:
    """The ID (config digest) of the image in an OCI archive, "" when skopeo cannot read it."""
    done = subprocess.run(
        ["skopeo", "inspect", "--raw", f"oci-archive:{path}"], check=False, text=True, capture_output=True
    )
    if done.returncode != 0:
        return ""
    return str(json.loads(done.stdout)["config"]["digest"]).removeprefix("sha256:")


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
            f"images: {built.reference} {'unchanged' if built.cached else f'{built.seconds:.0f} s'}, "
            f"{built.size_mb:.0f} MB, --help ok{where}",
            flush=True,
        )
    print(f"{'image':<45} {'MB':>6} {'build s':>8}  user")
    for built in rows:
        print(f"{built.reference:<45} {built.size_mb:>6.0f} {built.seconds:>8.0f}  {built.user}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
