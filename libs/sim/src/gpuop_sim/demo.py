"""`make demo`: the whole gpuop system on a laptop, against a simulated cluster.

Starts a SimCluster with AMD and NVIDIA nodes, prints the kubeconfig and a kubectl command to paste,
installs `charts/gpu-operator` with the real helm + kubectl when that chart exists, and shows a table
of nodes (vendor, GPU profile, rollout stage from `gpuop.dev/` labels/annotations, pods, GPU
resources, metrics URLs) redrawn in place until Ctrl-C. `--no-live` prints the table on each change
instead; `--duration` exits after that many seconds (tests use both).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from gpuop_sim import helm
from gpuop_sim.binaries import MissingBinaryError, find_binary, repo_root
from gpuop_sim.cli import add_cluster_arguments, cluster_from_args, stop_event_on_signals
from gpuop_sim.cluster import PROFILE_LABEL, SimCluster, SimNode
from gpuop_sim.workloads.kubeapi import NODES, PODS
from gpuop_sim.workloads.objects import (
    Obj,
    annotations_of,
    labels_of,
    name_of,
    node_is_ready,
    pod_is_ready,
    pod_phase,
    spec_of,
    status_of,
)
from gpuop_sim.workloads.simkubelet.nodestatus import is_extended

DEPLOY_PREFIX = "gpuop.dev/deploy."
OPERATOR_NAMESPACE = "gpu-operator"
RELEASE = "gpuop"
LABEL_COLUMNS = (
    PROFILE_LABEL,
    "node.kubernetes.io/instance-type",
    "feature.node.kubernetes.io/pci-1002.present",
    "feature.node.kubernetes.io/pci-10de.present",
)


@dataclass(frozen=True)
class NodeRow:
    node: str
    vendor: str
    gpus: str
    ready: str
    stage: str
    pods: str
    resources: str
    metrics: str


def stage_of(node: Obj) -> str:
    """Rollout stage as the operator records it: a `gpuop.dev/...stage|state` annotation plus the
    `gpuop.dev/deploy.<service>` labels, shown generically so new services need no demo change."""
    parts = [
        f"{k.split('/', 1)[1]}={v}"
        for k, v in sorted(annotations_of(node).items())
        if k.startswith("gpuop.dev/") and ("stage" in k or "state" in k)
    ]
    deployed = [
        k[len(DEPLOY_PREFIX) :] + ("" if v == "true" else f"={v}")
        for k, v in sorted(labels_of(node).items())
        if k.startswith(DEPLOY_PREFIX)
    ]
    if deployed:
        parts.append("deploy: " + ",".join(deployed))
    return "; ".join(parts) or "-"


def metrics_urls(pod: Obj) -> list[str]:
    """http://<podIP>:<port>/metrics for each container port named like `metrics`."""
    address = status_of(pod).get("podIP")
    if not address or pod_phase(pod) != "Running":
        return []
    urls = []
    for container in spec_of(pod).get("containers") or []:
        for port in container.get("ports") or []:
            if "metrics" in str(port.get("name") or "") and port.get("containerPort"):
                urls.append(f"http://{address}:{port['containerPort']}/metrics")
    return urls


def node_rows(sim_nodes: Sequence[SimNode], nodes: Sequence[Obj], pods: Sequence[Obj]) -> list[NodeRow]:
    """One table row per Node object (pure: the demo's whole view of the cluster)."""
    by_name = {n.name: n for n in sim_nodes}
    rows = []
    for node in sorted(nodes, key=name_of):
        name = name_of(node)
        sim = by_name.get(name)
        on_node = [p for p in pods if spec_of(p).get("nodeName") == name]
        running = [p for p in on_node if pod_phase(p) == "Running"]
        ready = sum(1 for p in running if pod_is_ready(p))
        allocatable = status_of(node).get("allocatable") or {}
        resources = ", ".join(f"{k}={v}" for k, v in sorted(allocatable.items()) if is_extended(k))
        urls = [url for p in on_node for url in metrics_urls(p)]
        pod_names = ", ".join(_pod_label(p) for p in running)
        rows.append(
            NodeRow(
                node=name,
                vendor=sim.vendor if sim else "?",
                gpus=_gpus(labels_of(node).get(PROFILE_LABEL, "?"), sim),
                ready="Ready" if node_is_ready(node) else "NotReady",
                stage=stage_of(node),
                pods=f"{ready}/{len(on_node)} ready" + (f": {pod_names}" if pod_names else ""),
                resources=resources or "-",
                metrics=" ".join(urls) or "-",
            )
        )
    return rows


def _pod_label(pod: Obj) -> str:
    """What a pod is, short: its app name label (the chart's service name) or its own name."""
    name = labels_of(pod).get("app.kubernetes.io/name") or name_of(pod)
    return name if pod_is_ready(pod) else f"{name} (starting)"


def _gpus(profile: str, sim: SimNode | None) -> str:
    if sim is None:
        return profile
    partitions = f", {sim.partitions} partitions" if sim.partitions else ""
    return f"{profile} x{sim.gpu_count}{partitions}"


def render(rows: Sequence[NodeRow]) -> Table:
    table = Table(title="gpuop simulated cluster", expand=False)
    for column in ("node", "vendor", "gpus", "ready", "stage", "pods", "allocatable", "metrics"):
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(
            row.node, row.vendor, row.gpus, row.ready, row.stage, row.pods, row.resources, row.metrics
        )
    return table


def kubectl_hint(kubeconfig: Path) -> str:
    try:
        kubectl = str(find_binary("kubectl"))
    except MissingBinaryError:
        kubectl = "kubectl"
    labels = " ".join(f"-L {label}" for label in LABEL_COLUMNS)
    return f"{kubectl} --kubeconfig {kubeconfig} get nodes {labels}"


def install_operator_chart(cluster: SimCluster, chart: Path, console: Console) -> bool:
    """The real `helm install` (release gpuop); False (with the reason printed) when it could not."""
    if not (chart / "Chart.yaml").is_file():
        console.print(f"No operator chart at {chart}: showing the bare simulated cluster.")
        return False
    console.print(f"Installing {chart.name} with helm install (release {RELEASE}) ...")
    try:
        helm.install(cluster.kubeconfig, chart, namespace=OPERATOR_NAMESPACE, release=RELEASE)
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


def snapshot(cluster: SimCluster) -> list[NodeRow]:
    rest = cluster.api()
    nodes, _ = rest.list(NODES)
    pods, _ = rest.list(PODS)
    return node_rows(cluster.nodes, nodes, pods)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m gpuop_sim.demo", description=__doc__.split("\n")[0])
    add_cluster_arguments(parser, amd_default=3, nvidia_default=2)
    parser.add_argument("--duration", type=float, default=None, help="exit after this many seconds")
    parser.add_argument("--no-live", action="store_true", help="print the table on each change, no redraw")
    parser.add_argument("--refresh", type=float, default=1.0, help="seconds between table refreshes")
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
    console = Console() if sys.stdout.isatty() else Console(width=180)
    cluster = cluster_from_args(args)
    try:
        console.print("Starting the simulated cluster ...")
        cluster.start()
        console.print(f"kubeconfig: {cluster.kubeconfig}")
        console.print(f"try:        {kubectl_hint(cluster.kubeconfig)}", soft_wrap=True)
        install_operator_chart(cluster, args.chart, console)
        deadline = None if args.duration is None else time.monotonic() + args.duration
        if args.no_live:
            _print_on_change(cluster, console, stop, deadline, args.refresh)
        else:
            with Live(render(snapshot(cluster)), console=console, refresh_per_second=4) as live:
                while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                    live.update(render(snapshot(cluster)))
                    stop.wait(_until(deadline, args.refresh))
            console.print()  # Live leaves the cursor at the end of the table
    except Exception as error:
        console.print(f"demo failed: {error}")
        return 1
    finally:
        console.print("Stopping the simulated cluster ...")
        cluster.stop()
    return 0


def _until(deadline: float | None, refresh: float) -> float:
    return refresh if deadline is None else max(min(refresh, deadline - time.monotonic()), 0.0)


def _print_on_change(
    cluster: SimCluster, console: Console, stop: threading.Event, deadline: float | None, refresh: float
) -> None:
    last: list[NodeRow] | None = None
    while True:
        rows = snapshot(cluster)
        if rows != last:
            console.print(render(rows))
            last = rows
        if stop.is_set() or (deadline is not None and time.monotonic() >= deadline):
            return
        stop.wait(_until(deadline, refresh))


if __name__ == "__main__":
    sys.exit(main())
