"""`make demo`: the whole gpuop system on a laptop, against a simulated cluster.

Starts a SimCluster with AMD and NVIDIA nodes, prints the kubeconfig and a kubectl command to paste,
installs `charts/gpu-operator` with the real helm + kubectl when that chart exists, and shows a table
of nodes (vendor, GPU profile, rollout stage from `gpuop.dev/` labels/annotations, pods, GPU
resources, self-check result, metrics URLs) redrawn in place until Ctrl-C. Once a node's test
runner is ready the demo asks it for the self-check, as an admin would with `kubectl annotate`; once
the config manager is Ready on the MI300X SPX node it labels that node for CPX/NPS4 (`--no-partition`
not), and the `partition` column shows it quiesce, apply and come back with 64 partitions; once the
MI300X CPX node passed its self-check it breaks one of its GPUs (`--no-break` not), and the `health`
column shows the node labeller's GPUHealthy condition and the node go through remediation and back.
With `--no-driver` the operator installs the driver, and once a DeviceConfig's nodes all run the
demo's first version and it is Ready, the demo patches its `driver.version` to the next one
(`--no-upgrade` not), and the stage column shows the nodes upgrade one at a time.
Each pod shows what `kubectl get pods` would (`device-plugin CrashLoopBackOff x26`: its container's
waiting/terminated reason and restart count), coloured on a terminal. `--no-live`, or a stdout that
is not a terminal (`make demo | tee demo.log`), prints the table on each change instead;
`--duration` exits after that many seconds. `--dra` runs the DRA driver instead of the device plugin
(the allocatable column then shows the devices its ResourceSlices publish).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from gpuop_common.gpu import AmdSysfsBackend
from gpuop_common.kubejson import DEVICECONFIGS, RESOURCESLICES
from gpuop_common.nodemeta import CONFIG_PROFILE_LABEL as PARTITION_PROFILE_LABEL
from gpuop_common.nodemeta import DRIVER_VERSION_LABEL, TEST_REQUEST_ANNOTATION
from gpuop_kubectl import table
from gpuop_kubectl.doctor import diagnose
from gpuop_kubectl.report import render_report
from gpuop_kubectl.snapshot import read_snapshot
from gpuop_kubectl.table import (
    DRA_DRIVER,
    NodeRow,
    app_name,
    gpu_healthy,
    self_check_of,
)
from rich.console import Console
from rich.live import Live
from rich.table import Table

from gpuop_sim import helm
from gpuop_sim.apiserver import openapi
from gpuop_sim.binaries import MissingBinaryError, find_binary, repo_root
from gpuop_sim.cli import (
    add_node_arguments,
    cluster_from_args,
    joined_from_args,
    port_number,
    stop_event_on_signals,
)
from gpuop_sim.cluster import PROFILE_LABEL, SimCluster, SimNode
from gpuop_sim.nodes import faults
from gpuop_sim.workloads.kubeapi import NODES, PODS
from gpuop_sim.workloads.objects import (
    Obj,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    pod_is_ready,
    pod_phase,
    selector_matches,
    spec_of,
    status_of,
)

# The test runner's Node API (docs/test-runner.md): the demo requests, the agent answers.
SELF_CHECK_REQUEST = "gpuop-selfcheck:demo"
TEST_RUNNER = "test-runner"
OPERATOR_NAMESPACE = "gpu-operator"
RELEASE = "gpuop"
# The operator's driver lifecycle on a node (docs/operator.md): installed version, upgrade step.
# With --no-driver the umbrella's DeviceConfigs install the driver through the operator's Jobs,
# whose playbooks send host commands to the simulator's recording fakes.
DEMO_DRIVER_VERSIONS = {"amd": "6.12", "nvidia": "570.124.06"}
# Unless --no-upgrade: once a DeviceConfig's nodes all run the first version, the demo patches it to
# this one, and the operator rolls it through the nodes one at a time (maxParallelUpgrades: 1).
DEMO_UPGRADE_VERSIONS = {"amd": "6.13", "nvidia": "570.133.20"}
DEMO_UPGRADE_POLICY = {"maxParallelUpgrades": 1, "rebootRequired": False}
# With --dra the DeviceConfigs run the DRA driver instead of the device plugin (docs/dra-driver.md).
# Unless --no-partition: the AMD DeviceConfig runs the config manager, and once it is Ready on the
# MI300X SPX node the demo labels that node for CPX/NPS4 (64 partitions when it is done).
CONFIG_MANAGER = "config-manager"
DEMO_PARTITION_NODE_PROFILE = "amd-mi300x-spx"
DEMO_PARTITION_PROFILE = {"name": "cpx-nps4", "amd": {"computePartition": "CPX", "memoryPartition": "NPS4"}}
# Unless --no-break: the AMD DeviceConfig remediates, and once the MI300X CPX node has passed its
# self-check the demo breaks one of its GPUs (an uncorrectable RAS error), as `gpuop-sim break-gpu`.
DEMO_BREAK_NODE_PROFILE = "amd-mi300x-cpx"
DEMO_REMEDIATION = {"enable": True, "conditionHoldSeconds": 5, "resetClearSeconds": 60}
# The AMD DeviceConfig time-slices one GPU model (issue 25): only the MI210 node's GPUs are shared.
DEMO_SHARED_MODEL, DEMO_SHARED_NODE_PROFILE, DEMO_REPLICAS = "MI210", "amd-mi210x8", 4
DEMO_SHARING = {"timeSlicing": {"models": [{"models": [DEMO_SHARED_MODEL], "replicas": DEMO_REPLICAS}]}}
LABEL_COLUMNS = (
    PROFILE_LABEL,
    "node.kubernetes.io/instance-type",
    "feature.node.kubernetes.io/pci-1002.present",
    "feature.node.kubernetes.io/pci-10de.present",
)


def self_check_due(nodes: Sequence[Obj], pods: Sequence[Obj], requested: set[str]) -> list[str]:
    """Nodes whose test runner is ready and that have neither a result nor a request yet, and that
    the demo has not asked before (an answer that clears the request must not start another)."""
    ready_on = {
        spec_of(p).get("nodeName")
        for p in pods
        if app_name(p) == TEST_RUNNER and pod_phase(p) == "Running" and pod_is_ready(p)
    }
    return [
        name_of(n)
        for n in sorted(nodes, key=name_of)
        if name_of(n) in ready_on and name_of(n) not in requested and self_check_of(n) == "-"
    ]


def node_rows(
    sim_nodes: Sequence[SimNode], nodes: Sequence[Obj], pods: Sequence[Obj], slices: Sequence[Obj] = ()
) -> list[NodeRow]:
    """`kubectl gpuop status`'s rows, with vendor and GPUs from the simulated nodes (their profile and
    GPU count are known before the node labeller runs)."""
    by_name = {n.name: n for n in sim_nodes}
    rows = []
    for row in table.node_rows(nodes, pods, slices):
        sim = by_name.get(row.node)
        profile = next((labels_of(n).get(PROFILE_LABEL, "?") for n in nodes if name_of(n) == row.node), "?")
        rows.append(replace(row, vendor=sim.vendor if sim else "?", gpus=_gpus(profile, sim)))
    return rows


def render(rows: Sequence[NodeRow]) -> Table:
    return table.render(rows, title="gpuop simulated cluster")


def _gpus(profile: str, sim: SimNode | None) -> str:
    if sim is None:
        return profile
    partitions = f", {sim.partitions} partitions" if sim.partitions else ""
    return f"{profile} x{sim.gpu_count}{partitions}"


def kubectl_command(kubeconfig: Path) -> str:
    """`<kubectl> --kubeconfig <path>`: the real kubectl against the simulated cluster."""
    try:
        kubectl = str(find_binary("kubectl"))
    except MissingBinaryError:
        kubectl = "kubectl"
    return f"{kubectl} --kubeconfig {kubeconfig}"


def gpuop_command(kubeconfig: Path) -> str:
    """`kubectl gpuop --kubeconfig <path>`: the plugin (`kubectl-gpuop` in the venv's bin/)."""
    plugin = Path(sys.executable).parent / "kubectl-gpuop"
    return f"{plugin if plugin.is_file() else 'kubectl gpuop'} --kubeconfig {kubeconfig}"


def kubectl_hint(kubeconfig: Path) -> str:
    labels = " ".join(f"-L {label}" for label in LABEL_COLUMNS)
    return f"{kubectl_command(kubeconfig)} get nodes {labels}"


def device_config_values(
    chart: Path, out: Path, *, driver: bool, partitions: bool, remediation: bool = False, dra: bool = False
) -> Path:
    """A values file for `chart` whose DeviceConfigs (the chart's own, so names, selectors and the
    rest stay) also install the driver (`driver`, host commands going to the simulator's fakes),
    run the DRA driver instead of the device plugin (`dra`) and, on AMD, run the config manager
    with the demo's profile (`partitions`) and remediate (`remediation`); helm's `--set` on a list
    index would replace the whole list. AMD always time-slices the demo's shared GPU model."""
    defaults = yaml.safe_load((chart / "values.yaml").read_text()) or {}
    configs = []
    for config in defaults.get("deviceConfigs") or []:
        spec = dict(config.get("spec") or {})
        vendor = str(spec.get("vendor"))
        if driver:
            version = DEMO_DRIVER_VERSIONS.get(vendor, "")
            spec["driver"] = {"enable": True, "version": version, "upgradePolicy": dict(DEMO_UPGRADE_POLICY)}
        if dra:
            spec["devicePlugin"] = {**(spec.get("devicePlugin") or {}), "enable": False}
            spec["draDriver"] = {**(spec.get("draDriver") or {}), "enable": True}
        if partitions and vendor == "amd":
            spec["configManager"] = {"enable": True, "profiles": [DEMO_PARTITION_PROFILE]}
        if remediation and vendor == "amd":
            spec["remediation"] = dict(DEMO_REMEDIATION)
        if vendor == "amd":
            section = "draDriver" if dra else "devicePlugin"
            spec[section] = {**(spec.get(section) or {}), "sharing": DEMO_SHARING}
        configs.append({**config, "spec": spec})
    out.write_text(yaml.safe_dump({"deviceConfigs": configs}, sort_keys=False))
    return out


def sharing_notes(sim_nodes: Sequence[SimNode], *, dra: bool) -> list[str]:
    """What the demo's sharing does to each shared node's allocatable, for one line each (pure)."""
    resource = f"{DRA_DRIVER} devices" if dra else "amd.com/gpu"
    return [
        f"sharing:    {n.name} ({n.gpu_count}x {DEMO_SHARED_MODEL}) is time-sliced {DEMO_REPLICAS} ways: "
        f"{resource} {n.gpu_count} without sharing -> {n.gpu_count * DEMO_REPLICAS} in the table"
        for n in sim_nodes
        if n.profile == DEMO_SHARED_NODE_PROFILE
    ]


def partition_due(sim_nodes: Sequence[SimNode], nodes: Sequence[Obj], pods: Sequence[Obj]) -> list[str]:
    """Nodes of the demo's partition profile whose config manager is Ready and that name no profile
    yet: the demo labels them, as an admin would (pure)."""
    ready_on = {
        spec_of(p).get("nodeName")
        for p in pods
        if app_name(p) == CONFIG_MANAGER and pod_phase(p) == "Running" and pod_is_ready(p)
    }
    wanted = {n.name for n in sim_nodes if n.profile == DEMO_PARTITION_NODE_PROFILE}
    return [
        name_of(n)
        for n in sorted(nodes, key=name_of)
        if name_of(n) in wanted & ready_on and PARTITION_PROFILE_LABEL not in labels_of(n)
    ]


def break_due(sim_nodes: Sequence[SimNode], nodes: Sequence[Obj], broken: set[str]) -> list[str]:
    """Nodes of the demo's break profile that passed their self-check with healthy GPUs and that
    the demo has not broken before (pure)."""
    wanted = {n.name for n in sim_nodes if n.profile == DEMO_BREAK_NODE_PROFILE}
    return [
        name_of(n)
        for n in sorted(nodes, key=name_of)
        if name_of(n) in wanted - broken and self_check_of(n) == "passed" and gpu_healthy(n)[0] == "True"
    ]


@dataclass(frozen=True)
class DriverUpgrade:
    """The demo's version change of one DeviceConfig: `spec.driver.version` -> `version`."""

    namespace: str
    name: str
    version: str

    @property
    def patch(self) -> Obj:
        return {"spec": {"driver": {"version": self.version}}}


def upgrade_due(configs: Sequence[Obj], nodes: Sequence[Obj], upgraded: set[str]) -> list[DriverUpgrade]:
    """DeviceConfigs that install the driver at the demo's first version of their vendor, are Ready
    for their current generation, and whose selected nodes all run that version, and that the demo
    has not upgraded before (`upgraded`: `namespace/name`): each goes to its vendor's next version
    (pure)."""
    due = []
    for config in sorted(configs, key=key_of):
        spec = spec_of(config)
        driver = spec.get("driver") or {}
        vendor = str(spec.get("vendor"))
        first, after = DEMO_DRIVER_VERSIONS.get(vendor), DEMO_UPGRADE_VERSIONS.get(vendor)
        if key_of(config) in upgraded or not driver.get("enable") or not after:
            continue
        selected = [n for n in nodes if selector_matches(spec.get("selector"), labels_of(n))]
        installed = all(labels_of(n).get(DRIVER_VERSION_LABEL) == first for n in selected)
        if selected and installed and driver.get("version") == first and _is_ready(config):
            due.append(DriverUpgrade(namespace_of(config), name_of(config), after))
    return due


def _is_ready(config: Obj) -> bool:
    """The operator's Ready condition, written for the DeviceConfig's current generation."""
    status = status_of(config)
    if status.get("observedGeneration") != meta(config).get("generation"):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def host_command_values(out: Path) -> Path:
    """A values file sending every host command (driver Jobs' playbooks, the config manager's
    driver reload) to the simulator's fakes under each node's root, instead of `chroot /host`."""
    host_exec = f"{sys.executable} -m gpuop_sim.hostfakes --root {{host_root}}"
    values = {"operator": {"driverJobs": {"hostExec": host_exec}}, "config-manager": {"hostExec": host_exec}}
    values["device-plugin"] = {"mpsControlDaemon": {"hostExec": host_exec}}  # nodes with sharing.mps
    out.write_text(yaml.safe_dump(values, sort_keys=False))
    return out


def install_operator_chart(
    cluster: SimCluster, chart: Path, console: Console, values_files: Sequence[Path] = ()
) -> bool:
    """The real `helm install` (release gpuop); False (with the reason printed) when it could not."""
    if not (chart / "Chart.yaml").is_file():
        console.print(f"No operator chart at {chart}: showing the bare simulated cluster.")
        return False
    unavailable = openapi.load_error()
    if unavailable is not None:
        # helm validates every manifest against /openapi/v3 and would only say "unable to respond
        # with a content type"; name the real cause instead.
        console.print(
            f"Cannot install {chart}: the simulated API server has no OpenAPI documents, {unavailable}"
        )
        return False
    console.print(f"Installing {chart.name} with helm install (release {RELEASE}) ...")
    try:
        helm.install(
            cluster.kubeconfig,
            chart,
            namespace=OPERATOR_NAMESPACE,
            release=RELEASE,
            values_files=values_files,
        )
    except (MissingBinaryError, helm.ChartError) as error:
        console.print(f"Cannot install {chart}: {error}")
        return False
    console.print(
        f"Installed {chart.name} into namespace {OPERATOR_NAMESPACE} (helm release {RELEASE}). Next, try:"
    )
    for command in helm.user_commands(
        cluster.kubeconfig, chart, namespace=OPERATOR_NAMESPACE, release=RELEASE
    ):
        console.print(f"  {command}", soft_wrap=True)
    return True


class Snapshots:
    """Reads the cluster for the table and does what the demo's admin does once it is due: asks each
    node's ready test runner for the self-check, relabels, breaks a GPU, upgrades the driver."""

    def __init__(
        self,
        cluster: SimCluster,
        console: Console,
        *,
        partitions: bool = False,
        breaks: bool = False,
        upgrades: bool = False,
    ) -> None:
        self.cluster = cluster
        self.console = console
        self.requested: set[str] = set()
        self.partitions = partitions
        self.breaks = breaks
        self.broken: set[str] = set()
        self.diagnosed: set[str] = set()
        self.upgrades = upgrades
        self.upgraded: set[str] = set()

    def __call__(self) -> list[NodeRow]:
        rest = self.cluster.api()
        nodes, _ = rest.list(NODES)
        pods, _ = rest.list(PODS)
        slices, _ = rest.list(RESOURCESLICES)
        for name in self_check_due(nodes, pods, self.requested):
            self.requested.add(name)
            self.console.print(
                f"self-check: kubectl annotate node {name} {TEST_REQUEST_ANNOTATION}={SELF_CHECK_REQUEST}"
            )
            body = {"metadata": {"annotations": {TEST_REQUEST_ANNOTATION: SELF_CHECK_REQUEST}}}
            rest.patch(NODES, name, body)
        for name in partition_due(self.cluster.nodes, nodes, pods) if self.partitions else []:
            profile = str(DEMO_PARTITION_PROFILE["name"])
            self.console.print(f"partition:  kubectl label node {name} {PARTITION_PROFILE_LABEL}={profile}")
            rest.patch(NODES, name, {"metadata": {"labels": {PARTITION_PROFILE_LABEL: profile}}})
        for name in break_due(self.cluster.nodes, nodes, self.broken) if self.breaks else []:
            self.broken.add(name)
            self._break(name)
        for name in sorted(self.broken - self.diagnosed):
            node = next((n for n in nodes if name_of(n) == name), None)
            if node is not None and gpu_healthy(node)[0] == "False":
                self.diagnosed.add(name)
                self._diagnose(name)
        configs = rest.list(DEVICECONFIGS)[0] if self.upgrades else []
        for upgrade in upgrade_due(configs, nodes, self.upgraded):
            self.upgraded.add(f"{upgrade.namespace}/{upgrade.name}")
            patch = json.dumps(upgrade.patch, separators=(",", ":"))
            self.console.print(
                f"upgrade:    {kubectl_command(self.cluster.kubeconfig)} -n {upgrade.namespace} "
                f"patch deviceconfig {upgrade.name} --type merge -p '{patch}'",
                soft_wrap=True,
            )
            rest.patch(DEVICECONFIGS, upgrade.name, upgrade.patch, upgrade.namespace)
        return node_rows(self.cluster.nodes, nodes, pods, slices)

    def _diagnose(self, name: str) -> None:
        """`kubectl gpuop doctor <node>` on the node the demo broke: its verdict, as an admin sees it."""
        self.console.print(
            f"doctor:     {gpuop_command(self.cluster.kubeconfig)} doctor {name}", soft_wrap=True
        )
        snap = read_snapshot(self.cluster.api(), OPERATOR_NAMESPACE)
        self.console.print(render_report(diagnose(snap, name)), soft_wrap=True, markup=False)

    def _break(self, name: str) -> None:
        """One uncorrectable RAS error on the node's first GPU, printed as the command that does it."""
        root = next(n.root for n in self.cluster.nodes if n.name == name)
        gpus = AmdSysfsBackend(root).enumerate()
        if not gpus:
            return
        command = f"gpuop-sim break-gpu --root {root} {gpus[0].pci_address}"
        self.console.print(f"break-gpu:  {command}", soft_wrap=True)
        faults.break_gpu(root, gpus[0].pci_address, "ras")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gpuop_sim.demo", description=__doc__.split("\n")[0])
    add_node_arguments(parser, amd_default=3, nvidia_default=2)
    parser.add_argument("--host", default="127.0.0.1", help="simulated API server listen address")
    parser.add_argument("--port", type=port_number, default=0, help="simulated API server port (0: pick one)")
    parser.add_argument(
        "--kubeconfig",
        type=Path,
        default=None,
        help="run against this existing cluster: join the simulated nodes to it (as `gpuop-sim join`) "
        "instead of starting the simulated control plane",
    )
    parser.add_argument("--name-prefix", default="", help="with --kubeconfig: prefix of the node names")
    parser.add_argument("--duration", type=float, default=None, help="exit after this many seconds")
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="print the table on each change, no redraw (the default when stdout is not a terminal)",
    )
    parser.add_argument("--refresh", type=float, default=1.0, help="seconds between table refreshes")
    parser.add_argument(
        "--no-partition",
        action="store_true",
        help="do not run the config manager, nor label the MI300X SPX node for CPX/NPS4",
    )
    parser.add_argument(
        "--no-break",
        action="store_true",
        help="do not remediate, nor break a GPU of the MI300X CPX node once it passed its self-check",
    )
    parser.add_argument(
        "--no-upgrade",
        action="store_true",
        help="with --no-driver: do not move the DeviceConfigs to the next driver version once the "
        "first is installed everywhere",
    )
    parser.add_argument(
        "--dra",
        action="store_true",
        help="the DeviceConfigs run the DRA driver instead of the device plugin (ResourceSlices, CDI)",
    )
    parser.add_argument(
        "--chart",
        type=Path,
        default=repo_root() / "charts" / "gpu-operator",
        help="operator chart to install",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.duration is not None and args.duration < 0:
        build_parser().error("--duration must be 0 or more")
    stop = stop_event_on_signals()
    # A pipe (logs, tests) gets a wide fixed width; a terminal keeps its own.
    console = Console() if sys.stdout.isatty() else Console(width=240)
    joining = args.kubeconfig is not None
    cluster = joined_from_args(args) if joining else cluster_from_args(args)
    try:
        what = f"simulated nodes joining the cluster of {args.kubeconfig}" if joining else "simulated cluster"
        console.print(f"Starting the {what} ...")
        cluster.start()
        console.print(f"kubeconfig: {cluster.kubeconfig}")
        console.print(f"try:        {kubectl_hint(cluster.kubeconfig)}", soft_wrap=True)
        console.print(
            f"status:     {gpuop_command(cluster.kubeconfig)} status  (the table below)", soft_wrap=True
        )
        values: list[Path] = []
        if (args.chart / "values.yaml").is_file():
            values.append(host_command_values(cluster.state_dir / "demo-host-values.yaml"))
        partitions, breaks = not args.no_partition, not args.no_break
        if (args.no_driver or partitions or breaks or args.dra) and (args.chart / "values.yaml").is_file():
            out = cluster.state_dir / "demo-deviceconfig-values.yaml"
            values.append(
                device_config_values(
                    args.chart,
                    out,
                    driver=args.no_driver,
                    partitions=partitions,
                    remediation=breaks,
                    dra=args.dra,
                )
            )
            for note in sharing_notes(cluster.nodes, dra=args.dra):
                console.print(note)
        if args.no_driver:
            console.print("Nodes start without a driver: the operator installs it with its playbook Jobs.")
            if not args.no_upgrade:
                console.print("Then the demo moves each DeviceConfig to the next driver version.")
        if args.dra:
            console.print(f"GPUs go through DRA ({DRA_DRIVER} ResourceSlices), not the device plugin.")
        installed = install_operator_chart(cluster, args.chart, console, values)
        deadline = None if args.duration is None else time.monotonic() + args.duration
        snapshot = Snapshots(
            cluster,
            console,
            partitions=partitions and installed,
            breaks=breaks and installed,
            upgrades=args.no_driver and not args.no_upgrade and installed,
        )
        if not use_live(no_live=args.no_live, is_terminal=console.is_terminal):
            _print_on_change(snapshot, console, stop, deadline, args.refresh)
        else:
            with Live(render(snapshot()), console=console, refresh_per_second=4) as live:
                while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                    live.update(render(snapshot()))
                    stop.wait(_until(deadline, args.refresh))
            console.print()  # Live leaves the cursor at the end of the table
    except Exception as error:
        console.print(f"demo failed: {error}")
        return 1
    finally:
        console.print("Stopping the simulated cluster ...")
        cluster.stop()
    return 0


def use_live(*, no_live: bool, is_terminal: bool) -> bool:
    """Redraw in place only on a terminal: piped into `tee` or a file, a live table would print
    nothing until the demo ends, so there the table is printed each time it changes."""
    return is_terminal and not no_live


def _until(deadline: float | None, refresh: float) -> float:
    return refresh if deadline is None else max(min(refresh, deadline - time.monotonic()), 0.0)


def _print_on_change(
    snapshot: Snapshots, console: Console, stop: threading.Event, deadline: float | None, refresh: float
) -> None:
    last: list[NodeRow] | None = None
    while True:
        rows = snapshot()
        if rows != last:
            console.print(render(rows))
            last = rows
        if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
            return
        stop.wait(_until(deadline, refresh))


if __name__ == "__main__":
    sys.exit(main())
