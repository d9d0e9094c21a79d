"""`gpuop-operator playbook <name>`: run a driver playbook on this node through ansible-runner.

Each run gets its own private data dir: the built-in playbook tree (playbooks, tasks, vars, the gpuop
modules and filters) is copied into its `project/`, and an override, when one is mounted for the
name, replaces the built-in file there after `ansible-playbook --syntax-check` passed on it, so an
override can use the same tasks and variables. The run's events are condensed into a
`PlaybookSummary` (jobresult), printed and written as the container's termination message.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import ansible_runner
import yaml
from pydantic import ValidationError

from gpuop_operator.jobresult import (
    PLAYBOOK_NAMES,
    STDERR_TAIL_CHARS,
    PlaybookSummary,
    PlaybookVars,
    TaskFailure,
)
from gpuop_operator.overridecheck import OVERRIDE_SUFFIXES

BUILTIN_DIR = Path(__file__).parent / "playbooks"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"
_FAILED_EVENTS = ("runner_on_failed", "runner_on_unreachable")


class PlaybookError(Exception):
    """A run could not start: bad input file, unknown playbook, broken override. Exit code 2."""


def load_vars_file(path: Path) -> PlaybookVars:
    """Read and validate the extra-vars file (YAML or JSON); errors name the file and the field."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise PlaybookError(f"{path}: cannot read the extra-vars file: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise PlaybookError(f"{path}: not valid YAML/JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise PlaybookError(f"{path}: the extra-vars file must hold a mapping, not {type(data).__name__}")
    try:
        return PlaybookVars.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise PlaybookError(f"{path}: {problems}") from exc


def ansible_extra_vars(settings: PlaybookVars, host_root: Path) -> dict[str, Any]:
    """The playbooks' variables (vars/defaults.yml names) for these settings."""
    driver = settings.driver
    return {
        "host_root": str(host_root),
        # `{host_root}` in a given prefix is the --host-root this run got: the operator writes one
        # prefix for every node, and only the Job's mount knows where the host is.
        "host_exec": (settings.host_exec or "chroot {host_root}").replace("{host_root}", str(host_root)),
        "gpu_vendor": settings.vendor,
        "driver_version": driver.version,
        "driver_blacklist": driver.blacklist,
        "kernel_module_type": driver.kernel_module_type,
        "kernel_module_parameters": list(driver.kernel_module_parameters),
        "amdgpu_repo_url": driver.amdgpu_installer_repo_url.rstrip("/"),
        "cuda_repo_url": driver.cuda_repo_url.rstrip("/"),
        "container_toolkit_repo_url": driver.container_toolkit_repo_url.rstrip("/"),
        "container_runtime": settings.container_runtime,
        "cdi_spec_dirs": list(settings.cdi_spec_dirs),
        "gpu_pci_addresses": list(settings.gpus),
    }


def find_override(name: str, overrides: Path | None) -> Path | None:
    """The override file for `name` in a mounted ConfigMap directory (key `<name>.yml` or `.yaml`)."""
    if overrides is None:
        return None
    found = [
        overrides / f"{name}{suffix}"
        for suffix in OVERRIDE_SUFFIXES
        if (overrides / f"{name}{suffix}").is_file()
    ]
    if len(found) > 1:
        raise PlaybookError(f"override for {name}: both {found[0].name} and {found[1].name} exist; keep one")
    return found[0] if found else None


def _ansible_env(data_dir: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "ANSIBLE_HOME": str(data_dir / "ansible-home"),
        "ANSIBLE_LOCAL_TEMP": str(data_dir / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "false",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false",
        "ANSIBLE_RETRY_FILES_ENABLED": "false",
    }


def _inventory() -> dict[str, Any]:
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {"all": {"hosts": {"localhost": local}}}


def _tail(text: str) -> str:
    return text[-STDERR_TAIL_CHARS:]


def prepare_project(data_dir: Path, name: str, override: Path | None) -> Path:
    """Lay the built-in tree under `data_dir/project`, the override (checked) in place of `name`."""
    project = data_dir / "project"
    shutil.copytree(BUILTIN_DIR, project, ignore=shutil.ignore_patterns("__pycache__"))
    if override is None:
        return project / f"{name}.yml"
    target = project / f"{name}.yml"
    try:
        shutil.copyfile(override, target)
    except OSError as exc:
        raise PlaybookError(f"override {override.name}: cannot read it: {exc.strerror}") from exc
    (data_dir / "syntax-check").mkdir()
    check = ansible_runner.run(
        private_data_dir=str(data_dir / "syntax-check"),
        project_dir=str(project),
        playbook=target.name,
        inventory=_inventory(),
        cmdline="--syntax-check",
        envvars=_ansible_env(data_dir),
        quiet=True,
    )
    if check.rc != 0:
        output = check.stdout.read() if check.stdout else ""
        raise PlaybookError(
            f"override {override.name} (ConfigMap key) for playbook {name} fails ansible-playbook "
            f"--syntax-check: {_tail(output.strip())}"
        )
    return target


def _failure_of(data: Mapping[str, Any]) -> TaskFailure:
    res = data.get("res") or {}
    if isinstance(res.get("results"), list):  # a loop: report its first failed item
        res = next((r for r in res["results"] if isinstance(r, dict) and r.get("failed")), res)
    command = res.get("cmd", "")
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    stderr = str(res.get("stderr") or res.get("module_stderr") or "")
    return TaskFailure(
        task=str(data.get("task", "")),
        command=str(command),
        message=str(res.get("msg") or res.get("reason") or "")[:1000],
        stderr_tail=_tail(stderr.rstrip()),
    )


def summarize(
    playbook: str,
    events: Iterable[Mapping[str, Any]],
    *,
    status: str,
    rc: int,
    started_at: datetime,
    finished_at: datetime,
) -> PlaybookSummary:
    """Condense ansible-runner events: failed tasks, changed/ok counts, the set_stats facts."""
    failures: list[TaskFailure] = []
    changed = ok = 0
    facts: dict[str, str] = {}
    task = "load the playbook"  # where an error outside any task (YAML, templating) happened
    errors: list[tuple[str, str]] = []
    for event in events:
        data = event.get("event_data") or {}
        kind = event.get("event")
        if kind == "playbook_on_task_start":
            task = str(data.get("task", task))
        elif kind in ("verbose", "error") and "ERROR" in str(event.get("stdout", "")):
            errors.append((task, str(event.get("stdout", "")).strip()))
        if kind in _FAILED_EVENTS and not data.get("ignore_errors"):
            failures.append(_failure_of(data))
        elif kind == "playbook_on_stats":
            changed = sum((data.get("changed") or {}).values())
            ok = sum((data.get("ok") or {}).values())
            for key, value in (data.get("artifact_data") or {}).items():
                facts[str(key)] = value if isinstance(value, str) else json.dumps(value)
    known = status if status in ("successful", "failed", "timeout", "canceled") else "failed"
    if (known != "successful" or rc != 0) and not failures and errors:
        failures.append(TaskFailure(task=errors[-1][0], message=errors[-1][1][:1000]))
    return PlaybookSummary(
        playbook=playbook,
        status=known,
        rc=rc,
        changed=changed,
        ok=ok,
        failed_tasks=failures,
        facts=facts,
        started_at=started_at,
        finished_at=finished_at,
    )


def run_playbook(
    name: str,
    host_root: Path,
    settings: PlaybookVars,
    *,
    overrides: Path | None = None,
    work_dir: Path | None = None,
    timeout: int | None = None,
    quiet: bool = False,
) -> PlaybookSummary:
    """Run one playbook against `host_root` with a fresh private data dir (removed afterwards).

    `timeout` (seconds) ends the run with status `timeout`, inside the Job's activeDeadlineSeconds,
    so that the summary still gets written."""
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9_.]*[a-z0-9])?", name):
        raise PlaybookError(f"playbook name {name!r}: lowercase letters, digits, '-', '_' and '.' only")
    override = find_override(name, overrides)
    if name not in PLAYBOOK_NAMES and override is None:
        # Another name is a user's playbook (remediation.playbook): only from the override ConfigMap.
        raise PlaybookError(
            f"unknown playbook {name!r} (built in: {', '.join(PLAYBOOK_NAMES)}; "
            f"another name needs an override {name}.yml)"
        )
    if override is None and not (BUILTIN_DIR / f"{name}.yml").is_file():
        raise PlaybookError(f"playbook {name!r} is not built in: mount an override {name}.yml for it")
    data_dir = Path(tempfile.mkdtemp(prefix=f"gpuop-{name}-", dir=work_dir))
    try:
        playbook = prepare_project(data_dir, name, override)
        started = datetime.now(UTC)
        runner = ansible_runner.run(
            private_data_dir=str(data_dir),
            project_dir=str(playbook.parent),
            playbook=playbook.name,
            inventory=_inventory(),
            extravars=ansible_extra_vars(settings, host_root),
            envvars=_ansible_env(data_dir),
            timeout=timeout,
            quiet=quiet,
        )
        return summarize(
            name,
            runner.events,
            status=str(runner.status),
            rc=int(runner.rc),
            started_at=started,
            finished_at=datetime.now(UTC),
        )
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuop-operator playbook", description=__doc__.splitlines()[0])
    parser.add_argument("name", help=f"playbook to run ({', '.join(PLAYBOOK_NAMES)})")
    parser.add_argument("--host-root", type=Path, default=Path("/host"), help="where the host's / is mounted")
    parser.add_argument("--extra-vars-file", type=Path, required=True, help="YAML/JSON: vendor, driver, ...")
    parser.add_argument("--overrides-dir", type=Path, help="mounted ConfigMap with <name>.yml overrides")
    parser.add_argument(
        "--termination-log", type=Path, default=Path(DEFAULT_TERMINATION_LOG), help="where the summary goes"
    )
    parser.add_argument(
        "--work-dir", type=Path, help="parent of the per-run private data dir (default: TMPDIR)"
    )
    parser.add_argument("--timeout", type=int, default=0, help="seconds before the run is stopped (0: none)")
    return parser


def main(argv: Sequence[str]) -> int:
    """Exit 0 when the playbook succeeded, 1 when it failed, 2 when it could not start."""
    args = _parser().parse_args(list(argv))
    started = datetime.now(UTC)
    try:
        settings = load_vars_file(args.extra_vars_file)
        summary = run_playbook(
            args.name,
            args.host_root,
            settings,
            overrides=args.overrides_dir,
            work_dir=args.work_dir,
            timeout=args.timeout or None,
        )
    except PlaybookError as exc:
        print(f"gpuop-operator playbook: {exc}", file=sys.stderr)
        # Still a summary, so that the operator can name the problem in a condition and an Event.
        summary = PlaybookSummary(
            playbook=args.name,
            status="failed",
            rc=2,
            failed_tasks=[TaskFailure(task="prepare the run", message=str(exc)[:1000])],
            started_at=started,
            finished_at=datetime.now(UTC),
        )
    message = summary.to_termination_message()
    print(message)
    try:
        args.termination_log.write_text(message)
    except OSError as exc:
        print(
            f"gpuop-operator playbook: cannot write {args.termination_log}: {exc.strerror}", file=sys.stderr
        )
    if summary.rc == 2 and not summary.ok:
        return 2
    return 0 if summary.succeeded else 1
