"""Every service image, run with runc the way its chart (or the operator) starts it.

Per image: the entrypoint's `--help` exits 0 as the image's USER; the USER satisfies every
rendered pod's runAsNonRoot/runAsUser; each container the charts render from it starts as the pod
says (user, read-only root, dropped capabilities, every volumeMount bind-mounted) and finds its
mount paths; the operator image carries ansible-core and can syntax-check and run its playbooks;
the OCI archives `make images IMAGE_ARCHIVES=1` wrote carry the release labels. Sizes are printed.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from gpuop_common.config.driver import DriverConfig
from gpuop_operator import driverjob
from gpuop_sim import helm

from tests.images import imagecheck
from tests.images.imagecheck import REPO, SERVICES, VERSION, ContainerRun, container

CHARTS = REPO / "charts"
PLAYBOOKS = "/app/lib/python3.11/site-packages/gpuop_operator/playbooks"
AGENTS = ("device-plugin", "dra-driver", "metrics-exporter", "node-labeller")
SYSTEM_PATHS = ("/dev", "/sys")
AGENT_LIMIT_MB = 200  # issue 23's aim for every agent image


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Each service's chart rendered with its defaults by the real helm; the operator's also holds
    the driver Job it creates (a privileged root container with the host's / at /host), and the
    CRD upgrade hook of the crds chart, which runs the operator image."""
    docs: dict[str, list[dict[str, Any]]] = {}
    for service in SERVICES:
        chart = CHARTS / service
        helm.dependency_build(chart)
        docs[service] = helm.template(chart, include_crds=False)
    helm.dependency_build(CHARTS / "crds")
    settings = driverjob.JobSettings(namespace="gpu-operator", release="gpuop", image=_chart_image(docs))
    job = driverjob.build_job(settings, "driver-install", "node-1", "amd", DriverConfig(version="6.4"))
    docs["operator"] += [*helm.template(CHARTS / "crds", include_crds=False), job]
    return docs


def _chart_image(docs: dict[str, list[dict[str, Any]]]) -> str:
    """The operator's own image, which it passes to the driver Jobs (`--driver-job-image`)."""
    return imagecheck.container_runs(docs["operator"], "gpuop-operator")[0].image


def image_user(image: str) -> str:
    return str(imagecheck.inspect(image)["Config"].get("User") or "")


@pytest.mark.parametrize("service", SERVICES)
def test_entrypoint_help_exits_0_as_the_image_user(service: str, require_image: Callable[[str], str]) -> None:
    image = require_image(service)
    done = container(image, "--help")
    assert done.returncode == 0, f"{image} --help: {done.returncode}\n{done.stderr[-2000:]}"
    assert "usage" in done.stdout.lower(), done.stdout[:500]
    probe = "import os; print(os.getuid(), os.getgid())"
    done = container("--entrypoint", "/app/bin/python", image, "-c", probe)
    assert done.returncode == 0, done.stderr
    user = imagecheck.numeric_user(image_user(image)) or (-1, None)
    assert done.stdout.split() == [str(user[0]), str(user[1] if user[1] is not None else 0)]


@pytest.mark.parametrize("service", SERVICES)
def test_image_user_satisfies_every_pod_the_charts_render(
    service: str, require_image: Callable[[str], str], rendered: dict[str, list[dict[str, Any]]]
) -> None:
    image = require_image(service)
    runs = imagecheck.container_runs(rendered[service], f"gpuop-{service}")
    assert runs, f"charts/{service} renders no container from gpuop-{service}"
    user = image_user(image)
    refusals = {run.workload: imagecheck.non_root_refusal(run, user) for run in runs}
    assert {name: why for name, why in refusals.items() if why} == {}


@pytest.mark.parametrize("service", SERVICES)
def test_each_chart_container_starts_as_its_pod_says_with_its_mounts(
    service: str,
    require_image: Callable[[str], str],
    rendered: dict[str, list[dict[str, Any]]],
    tmp_path: Path,
) -> None:
    """`--help` under the pod's user, read-only root and mounts, after a probe in the same
    container (it execs the entrypoint) found every mount path there and the writable ones (other
    than the node's /dev and /sys) writable by that user."""
    image = require_image(service)
    info = imagecheck.inspect(image)
    user, entrypoint = str(info["Config"].get("User") or ""), list(info["Config"]["Entrypoint"])
    failures = []
    for index, run in enumerate(imagecheck.container_runs(rendered[service], f"gpuop-{service}")):
        sources = _mount_sources(run, tmp_path / str(index))
        options = imagecheck.run_options(run, user, sources)
        paths = [m.path for m in run.mounts]
        writable = [m.path for m in run.mounts if not m.read_only and m.host_path not in SYSTEM_PATHS]
        probe = [json.dumps(paths), json.dumps(writable), *entrypoint, "--help"]
        done = container(*options, "--entrypoint", "/app/bin/python", image, "-c", MOUNT_PROBE, *probe)
        found = json.loads(done.stdout.splitlines()[0]) if done.stdout.startswith("{") else {}
        if done.returncode != 0 or found != {"missing": [], "unwritable": []}:
            failures.append(f"{run.workload}: exit {done.returncode}, {found} {done.stderr[-1500:]}")
    assert failures == []


# Runs in the container: report missing and unwritable mount paths, then become the entrypoint.
MOUNT_PROBE = """
import json, os, sys
paths, writable = json.loads(sys.argv[1]), json.loads(sys.argv[2])
found = {
    "missing": [p for p in paths if not os.path.exists(p)],
    "unwritable": [p for p in writable if not os.access(p, os.W_OK)],
}
print(json.dumps(found), flush=True)
os.execv(sys.argv[3], sys.argv[3:])
"""


def _mount_sources(run: ContainerRun, root: Path) -> dict[str, Path]:
    """What a node gives each mount: a hostPath is that path under one node root (the kubelet
    creates missing ones, as `DirectoryOrCreate`; a mount of the node's / shows the others inside
    it, as on a node), the node's own /dev and /sys are this machine's (runc needs a /dev/null to
    set the user up); an emptyDir is a 0777 directory, a projected volume a root-owned one."""
    node = root / "node"
    node.mkdir(parents=True)
    sources = {}
    for index, mount in enumerate(run.mounts):
        if mount.kind == "hostPath" and mount.host_path in SYSTEM_PATHS:
            sources[mount.path] = Path(mount.host_path)
            continue
        source = node / mount.host_path.lstrip("/") if mount.kind == "hostPath" else root / f"{index}"
        if mount.sub_path:
            source.parent.mkdir(parents=True, exist_ok=True)
            source.write_text("")
        else:
            source.mkdir(parents=True, exist_ok=True)
            if mount.kind == "emptyDir":
                source.chmod(0o777)
        sources[mount.path] = source
    return sources


def test_operator_image_syntax_checks_every_playbook(require_image: Callable[[str], str]) -> None:
    """ansible-core, the modules and filters the playbooks name are inside the image: a
    syntax check fails on a module or collection it cannot resolve. Root, as the driver Job runs."""
    image = require_image("operator")
    shipped = sorted(p.name for p in (REPO / "services/operator/src/gpuop_operator/playbooks").glob("*.yml"))
    assert shipped
    script = " && ".join(
        f"/app/bin/ansible-playbook --syntax-check -i localhost, -c local {PLAYBOOKS}/{name}"
        for name in shipped
    )
    done = container(
        "--user", "0:0", "--entrypoint", "/bin/sh", image, "-ec", f"cd {PLAYBOOKS} && {script}",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name in shipped:
        assert f"playbook: {PLAYBOOKS}/{name}" in done.stdout


def test_agent_images_stay_under_the_size_aim(require_image: Callable[[str], str]) -> None:
    sizes = {service: imagecheck.inspect(require_image(service))["Size"] / 1e6 for service in SERVICES}
    print("\n".join(f"image size {service}: {mb:.0f} MB" for service, mb in sizes.items()))
    assert {s: round(mb) for s, mb in sizes.items() if s in AGENTS and mb > AGENT_LIMIT_MB} == {}


ARCHIVES = REPO / "dist" / "images"


@pytest.mark.parametrize("service", SERVICES)
def test_oci_archive_carries_the_release_labels(service: str, require_image: Callable[[str], str]) -> None:
    """`make images IMAGE_ARCHIVES=1` wrote an archive skopeo reads, of the image in storage."""
    image = require_image(service)
    archive = ARCHIVES / f"gpuop-{service}-{VERSION}.tar"
    if not archive.is_file():
        pytest.fail(f"{archive} is missing: run `make images IMAGE_ARCHIVES=1`", pytrace=False)
    done = subprocess.run(
        ["skopeo", "inspect", "--config", f"oci-archive:{archive}"],
        check=False,
        text=True,
        capture_output=True,
    )
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)
    labels = config["config"]["Labels"]
    revision = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True, text=True, capture_output=True
    )
    assert labels["org.opencontainers.image.version"] == VERSION
    assert labels["org.opencontainers.image.title"] == f"gpuop-{service}"
    assert labels["org.opencontainers.image.source"] not in ("", "unknown")
    assert len(labels["org.opencontainers.image.revision"]) == 40, labels
    assert labels["org.opencontainers.image.revision"] == revision.stdout.strip(), (
        f"{archive} was built from another commit: run `make images IMAGE_ARCHIVES=1`"
    )
    # The archive is the image in storage (the same layers), not an older build of the same tag.
    assert config["rootfs"]["diff_ids"] == imagecheck.inspect(image)["RootFS"]["Layers"]


def test_driver_playbook_runs_in_the_operator_image_against_a_host_root(
    require_image: Callable[[str], str], tmp_path: Path
) -> None:
    """The driver Job's container for real: root, privileged, the host's / at /host, host commands
    through `chroot /host`. The host is the Debian root `make images` debootstraps, under an
    overlay whose upper layer holds what gpuop left there (the AMD driver marker): the uninstall
    reads the marker, queries dpkg in the host root (nothing installed), removes the marker, and
    changes nothing else; the cached root itself stays as it was."""
    image = require_image("operator")
    host = REPO / ".cache" / "gpuop-base-bookworm"
    if not (host / ".gpuop-complete").is_file():
        pytest.fail(f"{host} is missing: run `make images` (it builds that Debian root)", pytrace=False)
    upper, work, vars_dir, log = (tmp_path / name for name in ("upper", "work", "vars", "log"))
    marker = upper / "var/lib/gpuop/driver/amd.json"
    marker.parent.mkdir(parents=True)
    marker.write_text(json.dumps({"version": "6.2"}))
    for folder in (work, vars_dir, log):
        folder.mkdir()
    log.chmod(0o777)
    (vars_dir / "vars.json").write_text(json.dumps({"vendor": "amd", "driver": {"version": "6.4"}}))
    done = container(
        "--user", "0:0", "--privileged",
        "-v", f"{host}:/host:O,upperdir={upper},workdir={work}",
        "--mount", f"type=bind,src={vars_dir},dst=/vars,ro",
        "--mount", f"type=bind,src={log},dst=/log",
        image, "playbook", "driver-uninstall", "--host-root", "/host",
        "--extra-vars-file", "/vars/vars.json", "--termination-log", "/log/summary",
    )  # fmt: skip
    summary = (log / "summary").read_text() if (log / "summary").is_file() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:] + summary
    result = json.loads(summary)
    assert (result["status"], result["facts"]["os"], result["failed_tasks"]) == (
        "successful",
        "debian 12",
        [],
    )
    assert result["changed"] == 1, summary  # the marker, nothing else
    assert not marker.exists()
    assert not (host / "var/lib/gpuop").exists()
