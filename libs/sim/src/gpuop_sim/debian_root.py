"""A real Debian 12 (bookworm) host root for the driver playbooks, entered with `chroot` as on a node.

Unlike the Ubuntu and Rocky trees (`bare_host` + the recording `hostfakes`), this root runs the real
`apt-get`, `dpkg`, `dpkg-query` and `curl`: the playbook's package semantics (exact versions, upgrades,
downgrades, purge) are Debian's own. What a chroot cannot give is faked inside the root, by small
shell scripts that log every call to `/.gpuop-fakes/chroot-calls.log`:

- `uname -r` answers the simulated node's kernel (`/.gpuop-fakes/kernel`; `uname` is diverted);
- `dkms` keeps builds as directories `/var/lib/gpuop-fake-dkms/<module>/<version>/<kernel>` and
  needs `/usr/src/linux-headers-<kernel>` to build, as DKMS needs the headers;
- `modprobe` loads a module only when it is built for the running kernel and then lays the driver's
  tree, which `gpuop_sim.hostfakes` lays for the PCI GPUs (made on the host, kept as a tar);
  `modprobe -r` takes exactly that tree away again;
- `depmod`, `update-initramfs` only record.

The base root is made once per machine by `debootstrap --variant=minbase --include=curl` from
deb.debian.org and cached under the repository's `.cache/` (a lock keeps parallel test processes
from building it twice); `fresh_root` copies it for a test. `VendorMirror` lays apt repositories
shaped like AMD's and NVIDIA's (dists/<suite> for AMD, flat for CUDA and the container toolkit),
signed with a throwaway key, inside the root, so `file:` URLs reach them from the chroot.

Needs root (chroot, device nodes), `debootstrap`, `dpkg-deb`, `dpkg-scanpackages` and `gpg`;
`ensure_tools` installs the Debian packages through apt when they are missing and it runs as root.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from gpuop_sim import apt_tools, hostfakes
from gpuop_sim.bare_host import lay_bare_host

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
KERNEL = "6.1.0-28-amd64"  # the running kernel `uname -r` answers in the root
ROOT_NAME = "debian-bookworm-root"
TOOLS = {"debootstrap": "debootstrap", "dpkg-deb": "dpkg", "dpkg-scanpackages": "dpkg-dev", "gpg": "gpg"}
FAKES_DIR = ".gpuop-fakes"
CALLS = f"{FAKES_DIR}/chroot-calls.log"
TREES = f"{FAKES_DIR}/trees"
MIRROR_DIR = "srv/mirror"  # the vendor-shaped repositories, inside the root
KEY_NAME = "gpuop test repositories"


def default_cache_dir() -> Path:
    """`<repository>/.cache` (this file is libs/sim/src/gpuop_sim/debian_root.py)."""
    return Path(os.environ.get("GPUOP_CACHE_DIR") or Path(__file__).resolve().parents[4] / ".cache")


def missing_tools() -> list[str]:
    return apt_tools.missing_tools(TOOLS)


def ensure_tools() -> list[str]:
    """Install the Debian packages of missing tools (root with apt only); returns what is still missing."""
    return apt_tools.ensure_tools(TOOLS)


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def cached_root(cache: Path | None = None) -> Path:
    """The debootstrapped base root, built on first use (about 30 s on a fast mirror)."""
    cache = cache or default_cache_dir()
    root = cache / ROOT_NAME
    with _locked(cache / f"{ROOT_NAME}.lock"):
        if (root / ".gpuop-complete").is_file():
            return root
        building = cache / f"{ROOT_NAME}.building"
        shutil.rmtree(building, ignore_errors=True)
        shutil.rmtree(root, ignore_errors=True)
        command = ["debootstrap", "--variant=minbase", "--include=curl", SUITE, str(building), MIRROR]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}): {done.stderr[-2000:]}")
        for deb in (building / "var/cache/apt/archives").glob("*.deb"):
            deb.unlink()
        (building / ".gpuop-complete").write_text(f"{SUITE} {MIRROR}\n")
        building.rename(root)
    return root


def fresh_root(dest: Path, vendor: str, cache: Path | None = None) -> Path:
    """A copy of the cached root at `dest`, laid as a bare GPU node of `vendor` with the in-root fakes.

    The distribution's own archive is replaced by a local one (`srv/mirror/debian`, trusted) holding
    the kernel headers, so nothing in the root reaches the network."""
    base = cached_root(cache)
    subprocess.run(["cp", "-a", str(base), str(dest)], check=True)
    lay_bare_host(dest, "debian-12", "amd" if vendor == "amd" else "nvidia", runtime="none")
    hostfakes.set_kernel(dest, KERNEL)
    _install_fakes(dest)
    _lay_driver_trees(dest)
    return dest


def recorded(root: Path) -> list[list[str]]:
    """The faked commands run in the root so far, in order."""
    log = root / CALLS
    if not log.is_file():
        return []
    return [line.split("\t") for line in log.read_text().splitlines() if line]


def installed(root: Path) -> dict[str, str]:
    """Package -> version from the root's dpkg database, as `dpkg-query -W` reads it."""
    done = subprocess.run(
        [
            "dpkg-query",
            f"--admindir={root}/var/lib/dpkg",
            "-W",
            "-f=${db:Status-Abbrev}\t${Package}\t${Version}\n",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [line.split("\t") for line in done.stdout.splitlines()]
    return {name: version for status, name, version in rows if status.startswith("ii")}


def dkms_builds(root: Path) -> list[str]:
    """`<module>/<version>/<kernel>` for every build the fake dkms holds."""
    base = root / "var/lib/gpuop-fake-dkms"
    return sorted(str(p.relative_to(base)) for p in base.glob("*/*/*")) if base.is_dir() else []


# --- fakes inside the root -------------------------------------------------------------------------

_LOG = 'mkdir -p /.gpuop-fakes && printf "%s\\t" "$(basename "$0")" "$@" | sed "s/\\t$//" >> /' + CALLS
_LOG += " && echo >> /" + CALLS
_FAKES = {
    "usr/bin/uname": f"""#!/bin/sh
{_LOG}
if [ "$*" = "-r" ]; then cat /.gpuop-fakes/kernel; else exec /usr/bin/uname.distrib "$@"; fi
""",
    "usr/sbin/dkms": f"""#!/bin/sh
# gpuop test fake: builds are directories /var/lib/gpuop-fake-dkms/<module>/<version>/<kernel>.
{_LOG}
state=/var/lib/gpuop-fake-dkms
action=$1; [ $# -gt 0 ] && shift
module=; version=; kernel=; all=
while [ $# -gt 0 ]; do
  case $1 in
    -m) module=$2; shift ;; -v) version=$2; shift ;; -k) kernel=$2; shift ;; --all) all=1 ;;
    */*) module=${{1%%/*}}; version=${{1#*/}} ;;
  esac
  shift
done
headers() {{
  [ -d "/usr/src/linux-headers-$1" ] && return 0
  echo "Error! Your kernel headers for kernel $1 cannot be found." >&2; exit 1
}}
case $action in
  add) mkdir -p "$state/$module/$version" ;;
  build|install)
    k=${{kernel:-$(cat /.gpuop-fakes/kernel)}}; headers "$k"; mkdir -p "$state/$module/$version/$k" ;;
  remove) rm -rf "$state/$module/$version" ;;
  autoinstall)
    k=${{kernel:-$(cat /.gpuop-fakes/kernel)}}; headers "$k"
    for built in "$state"/*/*; do [ -d "$built" ] && mkdir -p "$built/$k"; done ;;
  status)
    for built in "$state"/*/*/*; do
      [ -d "$built" ] || continue
      k=${{built##*/}}; mv=${{built%/*}}; v=${{mv##*/}}; m=${{mv%/*}}; m=${{m##*/}}
      if [ -z "$module" ] || [ "$m" = "$module" ]; then echo "$m/$v, $k, x86_64: installed"; fi
    done ;;
  *) echo "Error! Unknown action $action" >&2; exit 2 ;;
esac
""",
    "usr/sbin/modprobe": f"""#!/bin/sh
# gpuop test fake: a module loads when dkms built it for the running kernel; its tree comes from a tar.
{_LOG}
remove=; all=; mods=; first=
for a in "$@"; do
  case $a in
    -r|--remove) remove=1 ;; -a|--all) all=1 ;; -*) ;;
    *) if [ -z "$first" ]; then first=$a; fi; mods="$mods $a" ;;
  esac
done
[ -n "$first" ] || {{ echo "modprobe: ERROR: missing module name" >&2; exit 1; }}
[ -n "$remove$all" ] || mods=$first
kernel=$(cat /.gpuop-fakes/kernel)
for m in $mods; do
  sys=$(echo "$m" | tr - _); base=${{sys%%_*}}
  if [ -n "$remove" ]; then
    rm -rf "/sys/module/$sys"
    if [ -f "/{TREES}/$m.paths" ]; then while read -r p; do rm -rf "/$p"; done < "/{TREES}/$m.paths"; fi
    continue
  fi
  if ! ls -d /var/lib/gpuop-fake-dkms/"$base"/*/"$kernel" >/dev/null 2>&1; then
    echo "modprobe: FATAL: Module $m not found in directory /lib/modules/$kernel" >&2; exit 1
  fi
  mkdir -p "/sys/module/$sys"; echo live > "/sys/module/$sys/initstate"
  if [ -f "/{TREES}/$m.tar" ]; then tar -xf "/{TREES}/$m.tar" -C /; fi
done
""",
    "usr/sbin/depmod": f"#!/bin/sh\n{_LOG}\n",
    "usr/sbin/update-initramfs": f"#!/bin/sh\n{_LOG}\n",
}


def _install_fakes(root: Path) -> None:
    subprocess.run(
        ["chroot", str(root), "dpkg-divert", "--quiet", "--local", "--rename", "--add", "/usr/bin/uname"],
        check=True,
    )
    for relative, script in _FAKES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(script)
        path.chmod(0o755)


def _tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def _lay_driver_trees(root: Path) -> None:
    """What `modprobe amdgpu` / `modprobe nvidia` lay on this root, made by `gpuop_sim.hostfakes` on a
    scratch copy of the PCI devices: a tar to unpack and the top-most paths to remove on unload."""
    for module in hostfakes.DRIVER_TREE_MODULES:
        with tempfile.TemporaryDirectory() as scratch:
            stage = Path(scratch)
            shutil.copytree(root / "sys/bus/pci/devices", stage / "sys/bus/pci/devices", symlinks=True)
            before = _tree(stage)
            hostfakes.lay_driver_tree(stage, module)
            added = sorted(_tree(stage) - before)
            top = [p for p in added if str(Path(p).parent) not in added]
            (root / TREES).mkdir(parents=True, exist_ok=True)
            with tarfile.open(root / TREES / f"{module}.tar", "w") as tar:
                for path in top:
                    tar.add(stage / path, arcname=path)
            (root / TREES / f"{module}.paths").write_text("".join(f"{p}\n" for p in top))


# --- vendor-shaped repositories --------------------------------------------------------------------


@dataclass(frozen=True)
class RepoPackage:
    """A package built with dpkg-deb; `dkms_module` makes its maintainer scripts build/remove it."""

    name: str
    version: str
    dkms_module: str = ""
    creates: str = ""  # a directory the package owns, e.g. /usr/src/linux-headers-<k>


def _module_version(version: str) -> str:
    return version.partition(":")[2] or version


def build_deb(package: RepoPackage, out_dir: Path) -> Path:
    with tempfile.TemporaryDirectory() as scratch:
        tree = Path(scratch) / "pkg"
        (tree / "DEBIAN").mkdir(parents=True)
        (tree / "DEBIAN/control").write_text(
            f"Package: {package.name}\nVersion: {package.version}\nArchitecture: all\n"
            "Maintainer: gpuop tests <tests@gpuop.invalid>\n"
            f"Description: gpuop test stand-in for {package.name}\n"
        )
        if package.dkms_module:
            module, version = package.dkms_module, _module_version(package.version)
            scripts = {
                "postinst": f'[ "$1" = configure ] || exit 0\ndkms add -m {module} -v {version}\n'
                f'dkms install -m {module} -v {version} -k "$(uname -r)"\n',
                "prerm": f"dkms remove -m {module} -v {version} --all\n",
            }
            for name, body in scripts.items():
                (tree / "DEBIAN" / name).write_text(f"#!/bin/sh\nset -e\n{body}")
                (tree / "DEBIAN" / name).chmod(0o755)
        if package.creates:
            owned = tree / package.creates.lstrip("/")
            owned.mkdir(parents=True)
            (owned / "Makefile").write_text("# gpuop test stand-in\n")
        deb = out_dir / f"{package.name}_{_module_version(package.version)}_all.deb"
        out_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(deb)],
            check=True,
            capture_output=True,
        )
    return deb


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass
class VendorMirror:
    """Signed apt repositories under `<root>/srv/mirror`, shaped like the vendors' (see module doc)."""

    root: Path
    gnupg: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="gpg")))

    def __post_init__(self) -> None:
        self.gnupg.chmod(0o700)
        self._gpg("--quick-gen-key", KEY_NAME, "ed25519", "sign", "never")

    def _gpg(self, *args: str) -> bytes:
        command = ["gpg", "--homedir", str(self.gnupg), "--batch", "--yes", "--pinentry-mode", "loopback"]
        command += ["--passphrase", ""]
        return subprocess.run([*command, *args], check=True, capture_output=True).stdout

    def close(self) -> None:
        subprocess.run(["gpgconf", "--homedir", str(self.gnupg), "--kill", "all"], check=False)
        shutil.rmtree(self.gnupg, ignore_errors=True)

    @property
    def base(self) -> Path:
        return self.root / MIRROR_DIR

    def url(self, name: str) -> str:
        """The `file:` URL of mirror `name` as the chroot sees it."""
        return f"file:///{MIRROR_DIR}/{name}"

    def write_key(self, relative: str) -> None:
        path = self.base / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(self._gpg("--armor", "--export", KEY_NAME))

    def dists_repo(self, directory: str, suite: str, packages: list[RepoPackage]) -> None:
        """`<directory>/dists/<suite>/main/binary-amd64/Packages` with the debs under `pool/`."""
        repo = self.base / directory
        for package in packages:
            build_deb(package, repo / "pool/main" / package.name[0] / package.name)
        index = repo / f"dists/{suite}/main/binary-amd64/Packages"
        index.parent.mkdir(parents=True, exist_ok=True)
        scan = subprocess.run(
            ["dpkg-scanpackages", "--multiversion", "pool", "/dev/null"],
            cwd=repo,
            capture_output=True,
            check=True,
        )
        index.write_bytes(scan.stdout)
        release = (
            f"Origin: gpuop-test\nLabel: gpuop-test\nSuite: {suite}\nCodename: {suite}\n"
            "Date: Thu, 01 Jan 2026 00:00:00 UTC\nArchitectures: amd64\nComponents: main\n"
            f"SHA256:\n {_sha256(index)} {index.stat().st_size} main/binary-amd64/Packages\n"
        )
        self._sign(repo / f"dists/{suite}", release)

    def flat_repo(self, directory: str, packages: list[RepoPackage]) -> None:
        """`<directory>/Packages` next to the debs (`deb <url> /`), as NVIDIA's repositories are."""
        repo = self.base / directory
        for package in packages:
            build_deb(package, repo)
        scan = subprocess.run(
            ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"],
            cwd=repo,
            capture_output=True,
            check=True,
        )
        (repo / "Packages").write_bytes(scan.stdout)
        index = repo / "Packages"
        release = (
            "Origin: gpuop-test\nLabel: gpuop-test\nDate: Thu, 01 Jan 2026 00:00:00 UTC\n"
            f"Architectures: amd64\nSHA256:\n {_sha256(index)} {index.stat().st_size} Packages\n"
        )
        self._sign(repo, release)

    def _sign(self, directory: str | Path, release: str) -> None:
        target = Path(directory)
        (target / "Release").write_text(release)
        self._gpg("--clearsign", "-o", str(target / "InRelease"), str(target / "Release"))

    def distribution(self, packages: list[RepoPackage]) -> None:
        """The distribution's own archive (trusted, unsigned), in place of deb.debian.org."""
        self.dists_repo("debian", SUITE, packages)
        (self.root / "etc/apt/sources.list").write_text(
            f"deb [trusted=yes] {self.url('debian')} {SUITE} main\n"
        )


def main() -> int:
    """`python -m gpuop_sim.debian_root`: install the tools, then build the cached root if missing.

    What a test session starts in the background (`gpuop_sim.debian_root_fixtures`). Missing tools
    are not a build failure: the tests that need the root skip, naming them."""
    missing = ensure_tools()
    if missing:
        print(f"not building the Debian root: missing {', '.join(missing)}")
        return 0
    try:
        print(cached_root())
    except RuntimeError as exc:
        print(exc)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
