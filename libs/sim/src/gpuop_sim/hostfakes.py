"""Recording fakes of the host commands the driver playbooks run, working on a temp host root.

A playbook runs every host command as `{{ host_exec }} <command> <args>`; on a node `host_exec` is
`chroot /host`, in tests it is `host_exec_for(root)`, i.e. `python -m gpuop_sim.hostfakes --root R`,
so `apt-get install -y amdgpu-dkms` lands here as `main(["--root", R, "apt-get", "install", ...])`.

Each call is appended to `<root>/.gpuop-fakes/commands.log` (one JSON argv per line) before it acts.
The fakes keep the state real tools keep, under the same root, so that a playbook's checks see what
its earlier commands did: installed packages (`dpkg-query`, `rpm -q`), built DKMS modules
(`dkms status`), loaded modules (`/sys/module/<m>/initstate`), device nodes, active units.

Where they differ from the real tools: no download (`curl -o` writes a made-up key; `apt-get update`
notes the `deb` lines of sources.list(.d) and `apt-cache madison` answers from those alone, with the
made-up vendor repositories: `amd_dkms_version` per amdgpu release, `NVIDIA_DRIVERS` per CUDA
repository; a package no noted repository holds gets no line, as from apt, and `apt-get install`
refuses a vendor package or version the lists lack with apt's own `E:` line and exit 100), no
compiler; a `*-dkms`
(or NVIDIA kernel module) package "builds" for the running kernel at install time, as its postinst
does. On a simulated node's root (a node profile, `gpuop_sim.drivertree`) `modprobe amdgpu` /
`modprobe nvidia` move in the profile's own driver tree (the KFD/DRM tree `build_node_root` lays;
the NVIDIA device nodes and the fake NVML's driver) and `modprobe -r` moves it out again; a driver
the profile ships with (in-box) loads without a DKMS build and at every boot. On a bare root
without a profile `modprobe amdgpu` lays a minimal KFD/DRM tree for the AMD PCI GPUs under
`sys/bus/pci/devices`, `modprobe nvidia` the `/dev/nvidia*` nodes for the NVIDIA ones (plain files,
not device nodes).

`reboot` / `systemctl reboot`: on a root a running SimCluster watches (`.gpuop-sim/rebooter`
names its live pid) the fake asks the cluster to reboot the node; run inside a simulated pod it then
waits to be killed by that reboot, as a real reboot ends the pod running it (run from a test it
returns at once and the reboot follows). Elsewhere it does what a boot leaves (`boot()`).

Failure injection: `fail(root, "dkms", stderr)` makes the next DKMS build (and `dkms` itself) fail
with that stderr, as a module that does not compile for the running kernel does. `absent(root,
"amd-smi")` makes a command missing on the host (exit 127, as a shell says), `busy(root, pci)` makes a
GPU reset refuse as the real tools do while a process holds the GPU; so does any other live process
registered on the GPU (`gpuop_sim.gpuholders`: every agent with the fake NVML initialised).

Partitions: `amd-smi set --gpu GPU --compute-partition MODE` (or `--memory-partition`) writes the
attribute through the simulated amdgpu driver (`gpuop_sim.nodes.amd_driver`), which refuses as the
kernel does; `busy(root, pci)` makes it answer AMDSMI_STATUS_BUSY first.

GPU faults (`gpuop_sim.faultstate`, made by `gpuop_sim.nodes.faults`): `amd-smi reset -G -g GPU`
and `nvidia-smi -r -i GPU` (GPU = index, PCI address or UUID) undo the faults of that GPU unless one
needs a reboot (RAS counters keep their counts, as amdgpu's do; a pending NVIDIA MIG mode takes
effect with a successful reset); `reboot` undoes every fault and zeroes the RAS counters.
`nvidia-smi --query-gpu=pci.bus_id,reset_status.reset_required --format=csv,noheader` reports each
GPU, `Yes` while it has a fault (after an XID, a reset is required).

Stdlib only: the playbook starts one process per command, so an import must stay cheap.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuop_sim import drivertree, faultstate, gpuholders
from gpuop_sim.jsonfile import write_json_atomic

STATE_DIR = ".gpuop-fakes"
LOG = f"{STATE_DIR}/commands.log"
PACKAGES = f"{STATE_DIR}/packages.json"
DKMS = f"{STATE_DIR}/dkms.json"
KERNEL = f"{STATE_DIR}/kernel"
BOOTS = f"{STATE_DIR}/boots"
FAILURES = f"{STATE_DIR}/fail"
APT_LISTS = f"{STATE_DIR}/apt-lists.json"  # the sources the last `apt-get update` read
AMD_DRIVER_STATE = drivertree.SIM_DIR / "amd-driver.json"  # gpuop_sim.nodes.amd_driver.DRIVER_STATE
ABSENT = f"{STATE_DIR}/absent"
BUSY = f"{STATE_DIR}/busy"
REBOOTER = drivertree.SIM_DIR / "rebooter"  # pid of the SimCluster that reboots this node
REBOOT_REQUEST = drivertree.SIM_DIR / "reboot-request"
REBOOT_WAIT_SECONDS = 60.0
IN_POD_ENV = "GPUOP_NODE_NAME"  # set in every simulated pod's containers
DEFAULT_KERNEL = "6.8.0-40-generic"
AMD_VENDOR = "0x1002"
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x03", "0x12")  # display controller, processing accelerator
# Laid by modprobe, gone after a reboot.
VOLATILE = ("sys/module", "sys/class/kfd", "sys/class/drm", "dev/kfd", "dev/dri", "proc/driver/nvidia")
UNIT_DIRS = ("etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")
# Packages whose installation builds a kernel module (their postinst runs `dkms autoinstall`).
_MODULE_PACKAGES = re.compile(
    r"(-dkms(-[0-9][\w.]*)?$|^nvidia-driver-\d+-open$|^cuda-drivers(-\d+)?$|^nvidia-open$)"
)

Fake = Callable[[Path, list[str]], int]


def host_exec_for(root: Path) -> str:
    """The `host_exec` value that sends a playbook's host commands to these fakes under `root`."""
    return shlex.join([sys.executable, "-m", "gpuop_sim.hostfakes", "--root", str(root)])


# Where a container-mode node carries these fakes on its own root, and the modules they need.
ON_HOST_DIR = "usr/lib/gpuop-sim"
_ON_HOST_MODULES = (
    "__init__.py",
    "hostfakes.py",
    "drivertree.py",
    "faultstate.py",
    "gpuholders.py",
    "jsonfile.py",
)
# `host_exec` for a container that has the node's root at {host_root} (a driver Job's /host) and a
# python3 of its own: the fakes run from the node's root against it, as `chroot /host` would run the
# host's own tools. (A simulated MI300X's partition writes need more of gpuop_sim: not carried.)
CONTAINER_HOST_EXEC = (
    f"env PYTHONPATH={{host_root}}/{ON_HOST_DIR} python3 -m gpuop_sim.hostfakes --root {{host_root}}"
)


def install_on_host(root: Path) -> Path:
    """Copy these fakes (stdlib only) onto a node root for CONTAINER_HOST_EXEC; returns the dir."""
    package = root / ON_HOST_DIR / "gpuop_sim"
    package.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).parent
    for module in _ON_HOST_MODULES:
        shutil.copyfile(here / module, package / module)
    return package


def recorded(root: Path) -> list[list[str]]:
    """Every command run so far, in order (argv without the `host_exec` prefix)."""
    log = root / LOG
    if not log.is_file():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def fail(root: Path, command: str, stderr: str) -> None:
    """Make `command` (and for `dkms`, every module build) fail with `stderr` from now on."""
    write_file(root / FAILURES / command, stderr)


def absent(root: Path, command: str) -> None:
    """Make `command` missing on this host from now on (exit 127, `command not found`)."""
    write_file(root / ABSENT / command, "")


def busy(root: Path, pci_address: str, process: str = "python3 (pid 4242)") -> None:
    """A process holds this GPU: resetting it fails until `idle()`."""
    write_file(root / BUSY / pci_address.lower(), process)


def idle(root: Path, pci_address: str) -> None:
    (root / BUSY / pci_address.lower()).unlink(missing_ok=True)


def set_kernel(root: Path, release: str) -> None:
    write_file(root / KERNEL, release)


def boots(root: Path) -> int:
    path = root / BOOTS
    return int(path.read_text()) if path.is_file() else 0


def write_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") or not text else text + "\n")


def _load(path: Path) -> dict[str, str]:
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def _save(path: Path, data: dict[str, str]) -> None:
    write_file(path, json.dumps(data, sort_keys=True))


def _kernel(root: Path) -> str:
    path = root / KERNEL
    return path.read_text().strip() if path.is_file() else DEFAULT_KERNEL


def _failure(root: Path, command: str) -> str | None:
    path = root / FAILURES / command
    return path.read_text() if path.is_file() else None


def _split_pin(spec: str) -> tuple[str, str]:
    """`name=1.2` (apt) or plain `name` -> (name, version or "")."""
    name, _, version = spec.partition("=")
    return name, version


def _split_rpm(spec: str) -> tuple[str, str]:
    """dnf's `name-VERSION[-RELEASE]` -> (name, version); kernel-* packages are install-only, one
    per kernel, so their whole spec stays the name."""
    match = re.fullmatch(r"(.+?)-(\d.*)", spec)
    if match is None or spec.startswith("kernel-"):
        return spec, ""
    return match.group(1), match.group(2)


def amd_dkms_version(release: str, family: str = "debian") -> str:
    """The amdgpu-dkms version the fake AMD repository of a ROCm release holds: like AMD's, the DKMS
    driver's own number with the release folded in (6.3.4 -> 60304), e.g. 1:6.10.5.60304-2125197.22.04."""
    parts = [*release.split("."), "0", "0"][:3]
    code = parts[0] + "".join(f"{int(p):02d}" if p.isdigit() else "00" for p in parts[1:])
    return f"1:6.10.5.{code}-2125197.22.04" if family == "debian" else f"6.10.5.{code}-2125197.el9"


# Driver versions the fake CUDA repositories hold (each in every branch-named and plain package).
NVIDIA_DRIVERS = ("550.127.05", "570.86.15", "570.124.06", "570.133.20", "575.57.08")


def _repository_packages(uri: str, suite: str) -> dict[str, list[str]]:
    """Package -> versions (highest first) the fake vendor repository `deb <uri> <suite>` holds,
    nothing for a repository the fakes do not serve."""
    amd = re.search(r"/amdgpu/([^/]+)/ubuntu/?$", uri)
    if amd and suite != "/":
        return {"amdgpu-dkms": [amd_dkms_version(amd.group(1))]}
    cuda = re.search(r"/(ubuntu\d+|debian\d+)/x86_64/?$", uri)
    if cuda and suite == "/":
        suffix = "-0ubuntu1" if cuda.group(1).startswith("ubuntu") else "-1"
        packages: dict[str, list[str]] = {}
        for driver in reversed(NVIDIA_DRIVERS):
            branch = driver.split(".")[0]
            for name in (
                f"nvidia-driver-{branch}-open",
                f"cuda-drivers-{branch}",
                "nvidia-open",
                "cuda-drivers",
            ):
                packages.setdefault(name, []).append(driver + suffix)
        return packages
    return {}


def _apt_sources(root: Path) -> list[list[str]]:
    """`[uri, suite, component...]` of every one-line `deb` entry in sources.list(.d)."""
    files = [root / "etc/apt/sources.list", *sorted((root / "etc/apt/sources.list.d").glob("*.list"))]
    sources = []
    for path in (f for f in files if f.is_file()):
        for line in path.read_text().splitlines():
            words = re.sub(r"\[[^]]*\]", " ", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                sources.append(words[1:])
    return sources


def _apt_describe(uri: str, suite: str, component: str) -> str:
    """How apt names an index in its output, e.g. `file:/srv/x jammy/main amd64 Packages`; a flat
    repository's (`suite` "/") is `<uri>  Packages`."""
    uri = re.sub(r"^([a-z0-9+.-]+://)[^/@]*@", r"\1", uri).rstrip("/")
    uri = re.sub(r"^file://(?=/)", "file:", uri)
    return f"{uri}  Packages" if suite == "/" else f"{uri} {suite}/{component} amd64 Packages"


def _module_of(package: str) -> str:
    """The kernel module a module package provides."""
    if "amdgpu" in package:
        return "amdgpu"
    if "nvidia" in package or package.startswith("cuda-drivers"):
        return "nvidia"
    return package.removesuffix("-dkms")


def _headers_present(root: Path, kernel: str) -> bool:
    return (root / "usr/src" / f"linux-headers-{kernel}").is_dir() or (
        root / "usr/src/kernels" / kernel
    ).is_dir()


def _build(root: Path, module: str, version: str, kernel: str, built: dict[str, str]) -> bool:
    """What DKMS does for one module and kernel: needs the headers, may fail (injected)."""
    if not _headers_present(root, kernel):
        print(f"Error! Your kernel headers for kernel {kernel} cannot be found.", file=sys.stderr)
        return False
    problem = _failure(root, "dkms")
    if problem is not None:
        print(f"Building module(s) for {module} on {kernel}...(bad exit status: 2)", file=sys.stderr)
        print(problem, end="" if problem.endswith("\n") else "\n", file=sys.stderr)
        return False
    built[f"{module}/{kernel}"] = version
    return True


def _install(
    root: Path, packages: list[str], error_code: int, split: Callable[[str], tuple[str, str]] = _split_pin
) -> int:
    db = _load(root / PACKAGES)
    built = _load(root / DKMS)  # "<module>/<kernel>" -> module version
    for spec in packages:
        name, version = split(spec)
        module_package = _MODULE_PACKAGES.search(name) is not None
        if module_package and not _build(root, _module_of(name), version or "1.0", _kernel(root), built):
            return error_code
        if name.startswith("linux-headers-"):
            (root / "usr/src" / name).mkdir(parents=True, exist_ok=True)
        if name.startswith("kernel-devel-"):
            (root / "usr/src/kernels" / name.removeprefix("kernel-devel-")).mkdir(parents=True, exist_ok=True)
        db[name] = version or "1.0"
        print(f"Setting up {name} ({db[name]}) ...")
    _save(root / PACKAGES, db)
    _save(root / DKMS, built)
    return 0


def _remove(root: Path, packages: list[str]) -> int:
    db = _load(root / PACKAGES)
    built = _load(root / DKMS)
    for spec in packages:
        name, _ = _split_pin(spec)
        if db.pop(name, None) is not None and _MODULE_PACKAGES.search(name):
            for key in [k for k in built if k.startswith(f"{_module_of(name)}/")]:
                del built[key]
    _save(root / PACKAGES, db)
    _save(root / DKMS, built)
    return 0


def _package_args(args: list[str]) -> list[str]:
    return [a for a in args if not a.startswith("-")]


# Packages only a vendor repository holds (the distro's own, headers and all, are always found).
_VENDOR_PACKAGES = re.compile(r"^(amdgpu-dkms|nvidia-driver-\d+-open|cuda-drivers(-\d+)?|nvidia-open)$")


def _apt_candidates(root: Path, name: str) -> list[str]:
    """Versions of a vendor package in the lists of the last `apt-get update`, highest first."""
    lists = json.loads((root / APT_LISTS).read_text()) if (root / APT_LISTS).is_file() else []
    return [v for uri, suite, *_ in lists for v in _repository_packages(uri, suite).get(name, [])]


def apt_resolve(root: Path, packages: list[str]) -> list[str] | str:
    """`name[=version]` specs as apt installs them (a vendor package at its candidate version), or
    apt's refusal: apt resolves every package before it installs any, from the lists of the last
    `apt-get update` alone (a repository added since is not read yet)."""
    resolved = []
    for spec in packages:
        name, version = _split_pin(spec)
        if _VENDOR_PACKAGES.match(name) is None:
            resolved.append(spec)
            continue
        candidates = _apt_candidates(root, name)
        if not candidates:
            return f"E: Unable to locate package {name}"
        if version and version not in candidates:
            return f"E: Version '{version}' for '{name}' was not found"
        resolved.append(f"{name}={version or candidates[0]}")
    return resolved


def add_vendor_repository(root: Path, vendor: str, release: str) -> str:
    """What a host that installs a vendor driver by hand has done first: the vendor's apt source
    added and `apt-get update` run (AMD: the amdgpu `release`, e.g. 6.3.4; NVIDIA: the CUDA
    repository of a distro, e.g. ubuntu2404). Returns the candidate version of the driver package."""
    if vendor == "amd":
        line, package = f"deb file:///srv/repo.radeon.com/amdgpu/{release}/ubuntu/ jammy main", "amdgpu-dkms"
    else:
        line, package = f"deb file:///srv/cuda/repos/{release}/x86_64/ /", "nvidia-open"
    write_file(root / f"etc/apt/sources.list.d/gpuop-test-{vendor}.list", line)
    apt_get(root, ["update"])
    return _apt_candidates(root, package)[0]


def apt_get(root: Path, args: list[str]) -> int:
    words = _package_args(args)
    verb, packages = (words[0], words[1:]) if words else ("", [])
    if verb == "install":
        print("Reading package lists...\nBuilding dependency tree...\nReading state information...")
        resolved = apt_resolve(root, packages)
        if isinstance(resolved, str):
            print(resolved, file=sys.stderr)
            return 100
        return _install(root, resolved, error_code=100)
    if verb in ("remove", "purge", "autoremove"):
        return _remove(root, packages)
    if verb == "update":  # the lists apt-cache answers from: what the sources named at this update
        write_file(root / APT_LISTS, json.dumps(_apt_sources(root)))
        return 0
    print(f"E: Invalid operation {verb}", file=sys.stderr)
    return 100


def apt_cache(root: Path, args: list[str]) -> int:
    """`apt-cache madison PKG...`: a line per version and index of the lists of the last `apt-get
    update` (none for a package no listed repository holds, exit 0, as apt 2.6 answers)."""
    words = _package_args(args)
    if words[:1] != ["madison"]:
        print(f"E: the fake knows madison only, not {shlex.join(args)}", file=sys.stderr)
        return 100
    lists = json.loads((root / APT_LISTS).read_text()) if (root / APT_LISTS).is_file() else []
    for package in words[1:]:
        for uri, suite, *components in lists:
            for version in _repository_packages(uri, suite).get(package, []):
                for component in components or [""]:
                    print(f"{package:>10} | {version:>10} | {_apt_describe(uri, suite, component)}")
    return 0


def dnf(root: Path, args: list[str]) -> int:
    words = _package_args(args)
    verb, packages = (words[0], words[1:]) if words else ("", [])
    if verb == "install":
        return _install(root, packages, error_code=1, split=_split_rpm)
    if verb in ("remove", "erase", "autoremove"):
        return _remove(root, packages)
    if verb in ("makecache", "clean"):
        return 0
    if verb == "repoquery":  # the enabled amdgpu repository's versions of the package
        repo = root / "etc/yum.repos.d/amdgpu.repo"
        release = re.search(r"/amdgpu/([^/]+)/", repo.read_text()) if repo.is_file() else None
        if release and "amdgpu-dkms" in packages:
            print(amd_dkms_version(release.group(1), "rhel"))
        return 0
    print(f"No such command: {verb}.", file=sys.stderr)
    return 1


def dpkg_query(root: Path, args: list[str]) -> int:
    db = _load(root / PACKAGES)
    name = args[-1] if args else ""
    if name not in db:
        print(f"dpkg-query: no packages found matching {name}", file=sys.stderr)
        return 1
    fmt = next((a.removeprefix("-f=").removeprefix("--showformat=") for a in args if "=" in a), "")
    print(fmt.replace("${Status}", "install ok installed").replace("${Version}", db[name]), end="")
    return 0


def rpm(root: Path, args: list[str]) -> int:
    db = _load(root / PACKAGES)
    fmt = _option(args, "--qf", "--queryformat")
    names = [a for a in _package_args(args) if a != fmt]
    missing = [name for name in names if name not in db]
    for name in names:
        if name not in db:
            print(f"package {name} is not installed")
        elif fmt is not None:  # db versions are VERSION-RELEASE
            print(fmt.replace("%{VERSION}-%{RELEASE}", db[name]), end="")
        else:
            print(f"{name}-{db[name]}")
    return 1 if missing else 0


def dkms(root: Path, args: list[str]) -> int:
    problem = _failure(root, "dkms")
    if problem is not None:
        print(problem, end="", file=sys.stderr)
        return 10
    built = _load(root / DKMS)
    if args[:1] == ["status"]:
        wanted = args[args.index("-m") + 1] if "-m" in args[:-1] else None
        for key, version in sorted(built.items()):
            module, _, kernel = key.partition("/")
            if wanted in (None, module):
                print(f"{module}/{version}, {kernel}, x86_64: installed")
        return 0
    if args[:1] == ["autoinstall"]:  # build every known module for the kernel (-k) or the running one
        kernel = args[args.index("-k") + 1] if "-k" in args[:-1] else _kernel(root)
        modules = {key.partition("/")[0]: version for key, version in built.items()}
        ok = all(_build(root, module, version, kernel, built) for module, version in sorted(modules.items()))
        _save(root / DKMS, built)
        return 0 if ok else 11
    print(f"Error! Unknown action {args[:1]}", file=sys.stderr)
    return 2


def _pci_gpus(root: Path, vendor: str) -> list[str]:
    found = []
    devices = root / "sys/bus/pci/devices"
    for device in sorted(devices.iterdir()) if devices.is_dir() else []:
        values = {
            n: (device / n).read_text().strip().lower() for n in ("vendor", "class") if (device / n).is_file()
        }
        if values.get("vendor") == vendor and values.get("class", "")[:4] in GPU_CLASSES:
            found.append(device.name)
    return found


def _lay_amdgpu(root: Path) -> None:
    gpus = _pci_gpus(root, AMD_VENDOR)
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    write_file(nodes / "0/properties", "cpu_cores_count 64\nsimd_count 0\ndrm_render_minor 0")
    for index, bdf in enumerate(gpus):
        render, card = 128 + index, index
        write_file(
            nodes / str(index + 1) / "properties",
            f"cpu_cores_count 0\nsimd_count 304\ndrm_render_minor {render}",
        )
        write_file(nodes / str(index + 1) / "gpu_id", str(1000 + index))
        for name in (f"card{card}", f"renderD{render}"):
            link = root / "sys/class/drm" / name / "device"
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.is_symlink():
                link.symlink_to(f"../../../bus/pci/devices/{bdf}")
            write_file(root / "dev/dri" / name, "")
    write_file(root / "dev/kfd", "")


def _lay_nvidia(root: Path) -> None:
    for index, _ in enumerate(_pci_gpus(root, NVIDIA_VENDOR)):
        write_file(root / "dev" / f"nvidia{index}", "")
    write_file(root / "dev/nvidiactl", "")
    write_file(
        root / "proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module (gpuop fake)"
    )


_LAYERS: dict[str, Callable[[Path], None]] = {"amdgpu": _lay_amdgpu, "nvidia": _lay_nvidia}
DRIVER_TREE_MODULES = tuple(_LAYERS)


def lay_driver_tree(root: Path, module: str) -> None:
    """Lay what `modprobe <module>` lays on a bare root (no node profile) for its PCI GPUs."""
    _LAYERS[module](root)


_DEV_NODES = {"nvidia-uvm": ("nvidia-uvm", "nvidia-uvm-tools"), "nvidia-modeset": ("nvidia-modeset",)}


def _amd_driver_in_use(root: Path) -> bool:
    """A device node of the simulated MI300X driver held open (its OPEN_DIR markers)."""
    if not (root / AMD_DRIVER_STATE).is_file() or not drivertree.is_loaded(root, "amdgpu"):
        return False
    from gpuop_sim.nodes import amd_driver  # only a simulated MI300X needs it

    return amd_driver.in_use(root)


def modprobe(root: Path, args: list[str]) -> int:
    remove = "-r" in args or "--remove" in args
    words = [a for a in args if not a.startswith("-")]
    if not words:
        print("modprobe: ERROR: missing module name", file=sys.stderr)
        return 1
    modules = words if ("-a" in args or "--all" in args or remove) else words[:1]
    params = [] if modules is words else words[1:]
    built = _load(root / DKMS)
    for module in modules:
        base = module.replace("-", "_").split("_")[0]
        mdir = root / "sys/module" / module.replace("-", "_")
        if remove:
            if module == "amdgpu" and _amd_driver_in_use(root):
                print(f"modprobe: FATAL: Module {module} is in use.", file=sys.stderr)
                return 1
            if module in drivertree.MODULES and drivertree.unload(root, module):
                continue
            for path in sorted(mdir.rglob("*"), reverse=True) if mdir.is_dir() else []:
                path.unlink() if not path.is_dir() or path.is_symlink() else path.rmdir()
            continue
        build = built.get(f"{base}/{_kernel(root)}")
        tree = module in drivertree.MODULES and drivertree.managed(root, module)
        if build is None and base in drivertree.MODULES and drivertree.inbox(root, base):
            build = ""  # the in-box module of the profile: its tree carries its version
        if build is None:
            print(
                f"modprobe: FATAL: Module {module} not found in directory /lib/modules/{_kernel(root)}",
                file=sys.stderr,
            )
            return 1
        if tree:
            drivertree.load(root, module)
            shutil.rmtree(mdir / "parameters", ignore_errors=True)  # a fresh load's parameters only
            if module == "amdgpu" and (root / AMD_DRIVER_STATE).is_file():
                from gpuop_sim.nodes import amd_driver  # only a simulated MI300X needs it

                amd_driver.apply_pending(root)  # a requested memory partition comes into force
        write_file(mdir / "initstate", "live")
        if build or not (mdir / "version").is_file():
            write_file(mdir / "version", build)
        for param in params:
            key, _, value = param.partition("=")
            write_file(mdir / "parameters" / key, value)
        if module in _LAYERS and not tree:
            _LAYERS[module](root)
        for node in _DEV_NODES.get(module, ()):
            write_file(root / "dev" / node, "")
    return 0


def uname(root: Path, args: list[str]) -> int:
    print(_kernel(root) if "-r" in args else "Linux")
    return 0


def systemctl(root: Path, args: list[str]) -> int:
    words = _package_args(args)
    if words[:1] == ["is-active"]:
        units = words[1:]
        active = all(
            any((root / d / f"{u.removesuffix('.service')}.service").is_file() for d in UNIT_DIRS)
            for u in units
        )
        print("active" if active else "inactive")
        return 0 if active else 3
    if words[:1] == ["reboot"]:
        return reboot(root, [])
    return 0  # restart, daemon-reload, enable: recorded, nothing to emulate


def boot(root: Path, kernel: str | None = None) -> None:
    """What a reboot leaves: no loaded module, no driver device node; then, as systemd-modules-load
    does, the modules named in /etc/modules-load.d are loaded if built for the (new) kernel, and a
    profile's in-box driver (gpuop_sim.drivertree) is loaded as udev does for matching devices.
    A power cycle ends every GPU fault (`gpuop_sim.faultstate`), those a reset cannot clear too, and
    the freshly loaded driver counts RAS errors from 0 again."""
    faultstate.clear(root, reboot=True)
    for counter in sorted(root.glob("sys/bus/pci/devices/*/ras/*_err_count")):
        faultstate.zero_ras(root, str(counter.relative_to(root)))
    for module in drivertree.MODULES:
        drivertree.unload(root, module)
    for relative in VOLATILE:
        path = root / relative
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for node in (root / "dev").glob("nvidia*"):
        node.unlink()
    if kernel is not None:
        set_kernel(root, kernel)
    write_file(root / BOOTS, str(boots(root) + 1))
    with contextlib.redirect_stderr(io.StringIO()):  # a module that fails to load only logs, as at boot
        for module in drivertree.MODULES:
            if drivertree.inbox(root, module):
                modprobe(root, [module])
        for conf in sorted((root / "etc/modules-load.d").glob("*.conf")):
            for line in conf.read_text().splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    modprobe(root, [line.strip()])


def _watched(root: Path) -> bool:
    """Whether a live SimCluster reboots this root's node (it wrote its pid there)."""
    try:
        pid = int((root / REBOOTER).read_text().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reboot(root: Path, args: list[str]) -> int:
    if not _watched(root):
        boot(root)
        return 0
    write_file(root / REBOOT_REQUEST, str(time.time()))
    print("Rebooting.", flush=True)
    if os.environ.get(IN_POD_ENV):
        time.sleep(REBOOT_WAIT_SECONDS)  # the node's reboot kills this container first
    return 0


def curl(root: Path, args: list[str]) -> int:
    """`curl -o FILE URL` (the repository keys): writes a made-up key, downloads nothing."""
    if "-o" not in args[:-1]:
        print("curl: the fake only saves to a file: -o FILE", file=sys.stderr)
        return 2
    target = args[args.index("-o") + 1]
    url = next((a for a in args if a.startswith(("http://", "https://", "file:"))), "")
    write_file(
        root / target.lstrip("/"),
        f"-----BEGIN PGP PUBLIC KEY BLOCK-----\nfake key from {url}\n-----END PGP PUBLIC KEY BLOCK-----",
    )
    return 0


def _reset_gpu(root: Path, pci: str) -> list[faultstate.Fault]:
    """What a GPU reset does: the GPU's faults end (but those needing a reboot). Its RAS counters
    keep their counts (amdgpu clears them only when the driver is reloaded); a RAS fault the reset
    cannot clear counts one more uncorrectable error as the GPU comes back. Returns the faults
    still there."""
    _cleared, kept = faultstate.clear(root, pci)
    mine = [f for f in kept if f.gpu == pci]
    for fault in mine:
        for relpath in fault.ras_files:
            faultstate.bump_ras(root, relpath)
    return mine


def _faulted(root: Path) -> set[str]:
    return {f.gpu for f in faultstate.active(root)}


def _select_gpu(root: Path, wanted: str, gpus: list[tuple[str, str]]) -> str | None:
    """PCI address of the GPU `wanted` names: an index, a PCI address (any domain width) or a UUID.
    `gpus` is (pci, uuid) in index order; a GPU gone from the bus still has its fault record."""
    if wanted.isdigit():
        return gpus[int(wanted)][0] if int(wanted) < len(gpus) else None
    lowered = wanted.lower()
    if lowered.count(":") == 2:  # 00000000:18:00.0 (NVML) or 0000:18:00.0 (kernel)
        lowered = "0000:" + lowered.split(":", 1)[1]
    for pci, uuid in gpus:
        if lowered in (pci, uuid.lower()):
            return pci
    return lowered if lowered in _faulted(root) else None


def _amd_gpus(root: Path) -> list[tuple[str, str]]:
    return [(pci, "") for pci in _pci_gpus(root, AMD_VENDOR)]


def _busy_with(root: Path, pci: str) -> str | None:
    """Who holds the GPU open: a test's `busy()` mark, or the live processes registered on it
    (`gpuop_sim.gpuholders`: the fake NVML of every agent that initialised it, a workload)."""
    path = root / BUSY / pci
    if path.is_file():
        return path.read_text().strip()
    held = gpuholders.holders(root, pci)
    return ", ".join(held) if held else None


def _option(args: list[str], *names: str) -> str | None:
    """The value of the first of `names` in `args` (`--opt VALUE` or `--opt=VALUE`)."""
    for i, arg in enumerate(args):
        for name in names:
            if arg == name and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


# amd-smi set's partition options and the amdgpu attribute each writes (amd_partition's names).
_PARTITION_OPTIONS = {
    "current_compute_partition": ("--compute-partition", "-C", "--accelerator-partition"),
    "current_memory_partition": ("--memory-partition", "-M"),
}
_SMI_STATUS = {16: "AMDSMI_STATUS_BUSY - Device busy", 22: "AMDSMI_STATUS_INVAL - Invalid parameters"}


def _amd_smi_set(root: Path, args: list[str]) -> int:
    """`amd-smi set --gpu GPU --compute-partition MODE | --memory-partition MODE`: the write goes to
    the simulated amdgpu driver (EINVAL / EBUSY as on the kernel, a memory mode kept pending until
    the next load, as amd-smi releases that do not reload the driver themselves leave it)."""
    wanted = _option(args, "--gpu", "-g")
    gpus = _amd_gpus(root)
    pci = _select_gpu(root, wanted, gpus) if wanted else None
    if pci is None:
        print(f"Invalid GPU ID(s): {wanted or '(none)'}", file=sys.stderr)
        return 2
    settings = [(attr, v) for attr, names in _PARTITION_OPTIONS.items() if (v := _option(args, *names))]
    if len(settings) != 1:
        print("amd-smi set: the fake sets one of --compute-partition, --memory-partition", file=sys.stderr)
        return 2
    attr, mode = settings[0]
    kind = attr.removeprefix("current_").upper()  # COMPUTE_PARTITION, MEMORY_PARTITION
    path = root / "sys/bus/pci/devices" / pci / attr
    if not path.is_file():
        print(f"GPU: {pci}\n    {kind}: AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported", file=sys.stderr)
        return 2
    holder = _busy_with(root, pci)
    if holder is not None:
        print(f"GPU: {pci}\n    {kind}: AMDSMI_STATUS_BUSY - Device busy ({holder})", file=sys.stderr)
        return 16
    from gpuop_sim.nodes import amd_driver  # only here: every other fake stays stdlib-only

    try:
        amd_driver.write_attr(path, mode.upper())
    except OSError as exc:
        status = _SMI_STATUS.get(exc.errno or 0, f"AMDSMI_STATUS_UNKNOWN_ERROR - {exc.strerror}")
        print(f"GPU: {pci}\n    {kind}: {status}", file=sys.stderr)
        return exc.errno or 1
    print(f"GPU: {pci}\n    {kind}: Successfully set {kind.lower().replace('_', ' ')} to {mode.upper()}")
    return 0


def amd_smi(root: Path, args: list[str]) -> int:
    """`amd-smi reset -G -g GPU [GPU ...]` (also --gpureset/--gpu), `amd-smi set --gpu GPU
    --compute-partition MODE | --memory-partition MODE`, `amd-smi version`."""
    if args[:1] == ["version"]:
        print("AMDSMI Tool: 24.7.1+gpuop-fake | AMDSMI Library version: 24.7.1 | ROCm version: 6.2.4")
        return 0
    if args[:1] == ["set"]:
        return _amd_smi_set(root, args[1:])
    if args[:1] != ["reset"] or not {"-G", "--gpureset"} & set(args):
        print(
            "amd-smi: the fake knows `reset -G -g GPU`, `version` and"
            f" `set --gpu GPU --compute-partition|--memory-partition MODE`; not {shlex.join(args)}",
            file=sys.stderr,
        )
        return 2
    flag = "-g" if "-g" in args else "--gpu"
    if flag not in args:
        print("amd-smi reset: -G needs a GPU: -g GPU", file=sys.stderr)
        return 2
    wanted = [a for a in args[args.index(flag) + 1 :] if not a.startswith("-")]
    gpus = _amd_gpus(root)
    targets = [_select_gpu(root, w, gpus) for w in wanted]
    if not wanted or None in targets:
        print(f"Invalid GPU ID(s): {' '.join(wanted) or '(none)'}", file=sys.stderr)
        return 2
    for pci in (t for t in targets if t is not None):
        holder = _busy_with(root, pci)
        if holder is not None:
            print(f"GPU: {pci}\n    RESET: AMDSMI_STATUS_BUSY - Device busy ({holder})", file=sys.stderr)
            return 16
        _reset_gpu(root, pci)
        print(f"GPU: {pci}\n    RESET: Successfully reset GPU {pci}")
    return 0


def _nvidia_gpus(root: Path) -> list[tuple[str, str]]:
    """(pci, uuid) per GPU the fake NVML state lists, in index order; a bare root's PCI GPUs."""
    path = root / faultstate.NVML_STATE
    if path.is_file():
        state = json.loads(path.read_text())
        return [
            ("0000:" + str(g["bus_id"]).split(":", 1)[1].lower(), str(g.get("uuid", "")))
            for g in state.get("gpus", [])
        ]
    return [(pci, "") for pci in _pci_gpus(root, NVIDIA_VENDOR)]


def nvidia_smi(root: Path, args: list[str]) -> int:
    """`nvidia-smi -r -i GPU`, `nvidia-smi -L`, and
    `--query-gpu=pci.bus_id,reset_status.reset_required --format=csv,noheader`."""
    gpus = _nvidia_gpus(root)
    query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
    if query is not None:
        fields = query.split(",")
        if any(f not in ("pci.bus_id", "reset_status.reset_required", "uuid") for f in fields):
            print(f'Field "{query}" is not a valid field to query.', file=sys.stderr)
            return 2
        faulted = _faulted(root)
        lost = {pci for pci, uuid in gpus if uuid and _nvml_lost(root, uuid)}
        for pci, uuid in gpus:
            if pci in lost:
                continue  # NVML cannot see it: nvidia-smi does not list it
            values = {
                "pci.bus_id": "0000" + pci,  # nvidia-smi prints the 8-digit domain
                "reset_status.reset_required": "Yes" if pci in faulted else "No",
                "uuid": uuid,
            }
            print(", ".join(values[f] for f in fields))
        return 0
    if "-L" in args:
        for index, (pci, uuid) in enumerate(gpus):
            print(f"GPU {index}: NVIDIA GPU (UUID: {uuid or pci})")
        return 0
    if "-r" not in args and "--gpu-reset" not in args:
        print(
            f"nvidia-smi: the fake knows -r -i GPU, -L, --query-gpu; not {shlex.join(args)}", file=sys.stderr
        )
        return 2
    flag = "-i" if "-i" in args else "--id"
    wanted = args[args.index(flag) + 1] if flag in args[:-1] else None
    target = _select_gpu(root, wanted, gpus) if wanted else None
    if target is None:
        print(f"No devices were found matching {wanted!r}" if wanted else "-r needs -i GPU", file=sys.stderr)
        return 6
    pci = target
    holder = _busy_with(root, pci)
    if holder is not None:
        print(
            f"GPU Reset couldn't run because GPU 0000{pci} is in use by another client: {holder}.\n"
            "1 device is currently being used by one or more other processes.",
            file=sys.stderr,
        )
        return 255
    _reset_gpu(root, pci)
    _activate_pending_mig_mode(root, pci)
    print(f"GPU 0000{pci} was successfully reset.")
    return 0


def _activate_pending_mig_mode(root: Path, pci: str) -> None:
    """A MIG mode change left pending (the GPU was in use) takes effect with a successful reset."""
    path = root / faultstate.NVML_STATE
    if not path.is_file():
        return
    state = json.loads(path.read_text())
    changed = False
    for gpu in state.get("gpus", []):
        mine = gpuholders.nvml_pci(str(gpu.get("bus_id", ""))) == pci
        if mine and "mig_pending" in gpu and gpu.get("mig_current") != gpu["mig_pending"]:
            gpu["mig_current"] = gpu["mig_pending"]
            changed = True
    if changed:
        write_json_atomic(path, state)


def _nvml_lost(root: Path, uuid: str) -> bool:
    state = json.loads((root / faultstate.NVML_STATE).read_text())
    return any(g.get("uuid") == uuid and g.get("lost") for g in state.get("gpus", []))


def _no_op(root: Path, args: list[str]) -> int:
    return 0


MPS_STATE = Path(".gpuop-fakes/mps.json")


def mps_state(root: Path) -> dict[str, Any]:
    """What the fake MPS control daemon runs with: `running`, `pipe_dir`, `defaults` (commands)."""
    path = root / MPS_STATE
    return dict(json.loads(path.read_text())) if path.is_file() else {"running": False, "defaults": []}


MOUNTS_STATE = Path(".gpuop-fakes/mounts.json")
# Inside the fake `unshare --mount`: the host path bound over /dev/shm in that (private) namespace.
_NS_DEV_SHM = "GPUOP_FAKE_NS_DEV_SHM"
_NS_PRIVATE = "GPUOP_FAKE_NS_PRIVATE"
_CAP_SYS_ADMIN = 21


def mounts(root: Path) -> dict[str, dict[str, str]]:
    """The host's mounts the fake `mount` made: target -> `type`, `options` (or `source` for a bind)."""
    path = root / MOUNTS_STATE
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def _may_mount(command: str) -> bool:
    """CAP_SYS_ADMIN in the effective set, as the kernel asks of mount(2) and unshare(CLONE_NEWNS).

    The simulated kubelet starts a container as its identity through setpriv (as root), so a pod
    without the capability fails here as on a node; a simulator run as another user (no identities)
    is not checked."""
    if os.geteuid() != 0:
        return True
    status = Path("/proc/self/status").read_text()
    eff = int(re.search(r"^CapEff:\s*([0-9a-f]+)$", status, re.M).group(1), 16)  # type: ignore[union-attr]
    if eff & (1 << _CAP_SYS_ADMIN):
        return True
    print(f"{command}: Operation not permitted", file=sys.stderr)
    return False


def mount(root: Path, args: list[str]) -> int:
    """`mount -t tmpfs -o OPTS tmpfs DIR`, `mount -o remount,OPTS DIR`, `mount --bind SRC DST`: the
    mount point must exist (and for a remount be mounted), as for util-linux `mount`. A bind inside
    the fake `unshare --mount` stays in that namespace; elsewhere it is the host's."""
    if not _may_mount("mount"):
        return 32
    table = mounts(root)
    match args:
        case ["-t", fstype, "-o", options, _source, target] if not options.startswith("remount"):
            entry = {"type": fstype, "options": options}
        case ["-o", options, target] if options.startswith("remount,"):
            if target not in table:
                print(f"mount: {target}: mount point not mounted or bad option.", file=sys.stderr)
                return 32
            entry = {**table[target], "options": options.removeprefix("remount,")}
        case ["--bind", source, target]:
            if not (root / source.lstrip("/")).is_dir():
                print(f"mount: {target}: special device {source} does not exist.", file=sys.stderr)
                return 32
            entry = {"type": "bind", "source": source}
        case _:
            print(f"mount: fake: unsupported arguments {args}", file=sys.stderr)
            return 1
    if not (root / target.lstrip("/")).is_dir():
        print(f"mount: {target}: mount point does not exist.", file=sys.stderr)
        return 32
    if entry["type"] == "bind" and os.environ.get(_NS_PRIVATE):
        if target == "/dev/shm":
            os.environ[_NS_DEV_SHM] = entry["source"]
        return 0
    write_file(root / MOUNTS_STATE, json.dumps({**table, target: entry}))
    return 0


def mountpoint(root: Path, args: list[str]) -> int:
    """`mountpoint -q DIR`: 0 when the fake `mount` mounted DIR, else 32 (util-linux's 'not one')."""
    target = args[-1] if args else ""
    return 0 if target in mounts(root) else 32


def _shell(root: Path, args: list[str]) -> int:
    """`sh -c 'A && exec B' NAME ARG...`: simple commands joined by `&&`, `"$1"`.. replaced, each run
    by its fake; enough for the command lines the product passes, not a shell."""
    if len(args) < 2 or args[0] != "-c":
        print(f"sh: fake: only -c SCRIPT is supported, got {args}", file=sys.stderr)
        return 2
    positional = args[3:]
    for part in args[1].split("&&"):
        words = shlex.split(part)
        words = words[1:] if words[:1] == ["exec"] else words
        words = [re.sub(r"^\$(\d)$", lambda m: positional[int(m.group(1)) - 1], w) for w in words]
        fake = _NS_FAKES.get(words[0]) if words else None
        if fake is None:
            print(f"sh: {words[0] if words else ''}: not found", file=sys.stderr)
            return 127
        if (rc := fake(root, words[1:])) != 0:
            return rc
    return 0


def unshare(root: Path, args: list[str]) -> int:
    """`unshare --mount [--propagation private] -- COMMAND...`: COMMAND runs in a mount namespace of
    its own; its binds do not reach the host (a real namespace needs CAP_SYS_ADMIN, as here)."""
    if "--" not in args:
        print("unshare: fake: expects OPTIONS -- COMMAND", file=sys.stderr)
        return 1
    split = args.index("--")
    options, command = args[:split], args[split + 1 :]
    if not _may_mount("unshare: unshare failed"):
        return 1
    fake = _NS_FAKES.get(command[0]) if command else None
    if fake is None:
        print(f"unshare: failed to execute {command[:1]}: No such file or directory", file=sys.stderr)
        return 127
    outside = {key: os.environ.get(key) for key in (_NS_PRIVATE, _NS_DEV_SHM)}
    if "--mount" in options and options[options.index("--mount") + 1 :][:2] != ["--propagation", "shared"]:
        os.environ[_NS_PRIVATE] = "1"
    try:
        return fake(root, command[1:])
    finally:  # the namespace ends with the command (a caller in this process is outside it)
        for key, value in outside.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)


def mps_control(root: Path, args: list[str]) -> int:
    """`nvidia-cuda-mps-control`: `-d` starts the daemon (its control pipe and log appear under
    CUDA_MPS_PIPE_DIRECTORY / CUDA_MPS_LOG_DIRECTORY on the host root; `dev_shm` in its state is the
    host directory it has as /dev/shm, `/dev/shm` itself unless started under the fake `unshare` with
    a bind); without arguments it reads commands from stdin, as the real client does, and fails when
    no daemon listens."""
    state = mps_state(root)
    pipe = root / os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps").lstrip("/")
    logs = root / os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps").lstrip("/")
    if args == ["-d"]:
        if state["running"]:
            print("An instance of this daemon is already running", file=sys.stderr)
            return 1
        pipe.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        (pipe / "control").write_text("")
        with (logs / "control.log").open("a") as out:
            out.write("Starting control daemon\n")
        state = {
            "running": True,
            "pipe_dir": str(pipe.relative_to(root)),
            "dev_shm": os.environ.get(_NS_DEV_SHM, "/dev/shm"),
            "defaults": [],
        }
    elif args:
        print(f"nvidia-cuda-mps-control: unknown option {args[0]}", file=sys.stderr)
        return 1
    else:
        if not state["running"] or not (pipe / "control").exists():
            print("Cannot find MPS control daemon process", file=sys.stderr)
            return 1
        for line in sys.stdin.read().splitlines():
            if line.strip() == "quit":
                (pipe / "control").unlink(missing_ok=True)
                state = {"running": False, "defaults": []}
            elif line.strip():
                # A later value of the same setting (and GPU) replaces the earlier one.
                defaults = [d for d in state["defaults"] if d.split()[:-1] != line.split()[:-1]]
                state["defaults"] = [*defaults, line.strip()]
    write_file(root / MPS_STATE, json.dumps(state))
    return 0


FAKES: dict[str, Fake] = {
    "apt-get": apt_get,
    "apt-cache": apt_cache,
    "dnf": dnf,
    "dpkg-query": dpkg_query,
    "rpm": rpm,
    "dkms": dkms,
    "modprobe": modprobe,
    "depmod": _no_op,
    "uname": uname,
    "systemctl": systemctl,
    "reboot": reboot,
    "curl": curl,
    "amd-smi": amd_smi,
    "nvidia-smi": nvidia_smi,
    "nvidia-cuda-mps-control": mps_control,
    "update-initramfs": _no_op,
    "dracut": _no_op,
    "mount": mount,
    "mountpoint": mountpoint,
    "unshare": unshare,
}
# What the fake `unshare` and `sh -c` can run: `sh` only there, so no playbook gets a pretend shell.
_NS_FAKES: dict[str, Fake] = {**FAKES, "sh": _shell}


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[0] != "--root":
        print("usage: python -m gpuop_sim.hostfakes --root ROOT COMMAND [ARGS...]", file=sys.stderr)
        return 2
    root, command, rest = Path(args[1]), args[2], args[3:]
    log = root / LOG
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(json.dumps([command, *rest]) + "\n")
    fake = FAKES.get(Path(command).name)
    if fake is None or (root / ABSENT / Path(command).name).exists():
        print(f"{command}: command not found (no gpuop fake)", file=sys.stderr)
        return 127
    if command != "dkms" and (problem := _failure(root, Path(command).name)) is not None:
        print(problem, end="", file=sys.stderr)
        return 1
    return fake(root, rest)


if __name__ == "__main__":
    raise SystemExit(main())
