"""`gpuop-sim`: run a simulated cluster from the command line.

    gpuop-sim serve --amd-nodes 2 --nvidia-nodes 1 --pods process --kubeconfig /tmp/kc

prints one JSON line once the cluster is ready ({"port", "url", "kubeconfig", "state_dir", "nodes":
{name: root}}) and runs until SIGTERM/SIGINT, then stops every simulated process and exits 0.

    gpuop-sim join --kubeconfig ~/.kube/config --amd-nodes 1 --nvidia-nodes 1 [--name-prefix sim-]

adds only the node side (Nodes, their simulated kubelets, device-plugin/pod-resources/DRA sockets and
host roots) to an existing cluster, prints the same JSON line, and on SIGTERM/SIGINT deletes its
Nodes and stops every process it started.

    gpuop-sim break-gpu --root <node root> 0000:05:00.0 [--kind ras|vanished|xid] [--needs-reboot]

makes that GPU unhealthy (gpuop_sim.nodes.faults.break_gpu) and prints the recorded fault as JSON; a
GPU reset (the fakes' `amd-smi reset` / `nvidia-smi -r`) clears it, unless it needs a reboot.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from gpuop_sim.cluster import SimCluster
from gpuop_sim.nodes import PROFILES, faults
from gpuop_sim.workloads.simkubelet.heartbeat import RENEW_INTERVAL
from gpuop_sim.workloads.simkubelet.runtime import PODS_MODES

KNOWN_PROFILES = tuple(PROFILES)


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def port_number(text: str) -> int:
    value = _count(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


def _profiles(text: str) -> list[str]:
    profiles = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in profiles if p not in KNOWN_PROFILES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown profile(s) {', '.join(unknown)}; known: {', '.join(KNOWN_PROFILES)}"
        )
    return profiles


def add_cluster_arguments(parser: argparse.ArgumentParser, *, amd_default: int, nvidia_default: int) -> None:
    """Flags shared by `gpuop-sim serve` and the demo."""
    add_node_arguments(parser, amd_default=amd_default, nvidia_default=nvidia_default)
    parser.add_argument("--host", default="127.0.0.1", help="API server listen address")
    parser.add_argument("--port", type=port_number, default=0, help="API server port (0: pick a free one)")
    parser.add_argument("--kubeconfig", type=Path, default=None, help="where to write the kubeconfig")
    parser.add_argument(
        "--node-monitor-grace-period",
        type=float,
        default=None,
        help="seconds without heartbeats before a node is marked Unknown (kube-controller-manager's "
        "flag; default 50)",
    )


def add_node_arguments(parser: argparse.ArgumentParser, *, amd_default: int, nvidia_default: int) -> None:
    """The node side's flags: `serve` (with its control plane) and `join` (to any cluster)."""
    parser.add_argument(
        "--amd-nodes", type=_count, default=amd_default, help="AMD GPU nodes (cycling profiles)"
    )
    parser.add_argument("--nvidia-nodes", type=_count, default=nvidia_default, help="NVIDIA GPU nodes")
    parser.add_argument("--cpu-nodes", type=_count, default=0, help="nodes without GPUs")
    parser.add_argument(
        "--profiles",
        type=_profiles,
        default=None,
        help=f"explicit comma-separated node profiles ({', '.join(KNOWN_PROFILES)})",
    )
    parser.add_argument(
        "--pods",
        choices=PODS_MODES,
        default="process",
        help="process: run pods as local processes; container: run each container from its image "
        "with runc (root; images in local container storage); stub: only report them Running",
    )
    parser.add_argument(
        "--no-driver",
        action="store_true",
        help="GPU nodes start with their PCI devices but no driver (the host fakes' modprobe loads it)",
    )
    parser.add_argument(
        "--state-dir", type=Path, default=None, help="node roots, pod dirs and logs (default: a temp dir)"
    )
    parser.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))


def _node_side(args: argparse.Namespace) -> dict[str, Any]:
    """What `serve` and `join` both take: the nodes, their pods and where the kubeconfig is."""
    return {
        "amd_nodes": args.amd_nodes,
        "nvidia_nodes": args.nvidia_nodes,
        "cpu_nodes": args.cpu_nodes,
        "profiles": args.profiles,
        "pods": args.pods,
        "kubeconfig": args.kubeconfig,
        "driver_loaded": not args.no_driver,
    }


def cluster_from_args(args: argparse.Namespace) -> SimCluster:
    return SimCluster(
        args.state_dir,
        **_node_side(args),
        host=args.host,
        port=args.port,
        node_monitor_grace_period=getattr(args, "node_monitor_grace_period", None),
    )


def joined_from_args(args: argparse.Namespace) -> SimCluster:
    return SimCluster(args.state_dir, **_node_side(args), control_plane=False, name_prefix=args.name_prefix)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuop-sim", description="gpuop simulated Kubernetes cluster")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    serve = commands.add_parser("serve", help="run a simulated cluster until SIGTERM/SIGINT")
    add_cluster_arguments(serve, amd_default=1, nvidia_default=1)
    join = commands.add_parser(
        "join", help="add simulated GPU nodes (kubelets, device plugins, host roots) to an existing cluster"
    )
    join.add_argument("--kubeconfig", type=Path, required=True, help="the cluster to join")
    join.add_argument("--name-prefix", default="", help="prefix of the node names (e.g. sim-)")
    add_node_arguments(join, amd_default=0, nvidia_default=0)
    broken = commands.add_parser(
        "break-gpu", help="make one GPU of a simulated node unhealthy (the node's root from `serve`)"
    )
    broken.add_argument("--root", type=Path, required=True, help="the node's root (serve prints them)")
    broken.add_argument("gpu", help="PCI address (NVIDIA: also UUID or index)")
    broken.add_argument("--kind", choices=faults.BREAK_KINDS, default="ras", help="what breaks (default ras)")
    broken.add_argument(
        "--needs-reboot", action="store_true", help="a GPU reset does not clear it; a reboot does"
    )
    return parser


def break_gpu(args: argparse.Namespace) -> int:
    try:
        fault = faults.break_gpu(args.root, args.gpu, args.kind, needs_reboot=args.needs_reboot)
    except (faults.FaultError, OSError, ValueError, KeyError) as error:
        print(f"gpuop-sim break-gpu: {error}", file=sys.stderr)
        return 1
    print(json.dumps(dataclasses.asdict(fault)))
    return 0


def stop_event_on_signals() -> threading.Event:
    """An event set by the first SIGTERM/SIGINT."""
    stop = threading.Event()

    def handler(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


def serve(args: argparse.Namespace) -> int:
    return run_until_stopped(cluster_from_args(args), "start the simulated cluster")


def join(args: argparse.Namespace) -> int:
    return run_until_stopped(joined_from_args(args), f"join the cluster of {args.kubeconfig}")


def run_until_stopped(cluster: SimCluster, what: str) -> int:
    """Start, print the ready line, run until SIGTERM/SIGINT, stop everything started."""
    stop = stop_event_on_signals()
    try:
        cluster.start()
    except Exception as error:
        cluster.stop()
        print(f"gpuop-sim: could not {what}: {error}", file=sys.stderr)
        return 1
    try:
        ready = {
            "port": cluster.port,
            "url": cluster.url,
            "kubeconfig": str(cluster.kubeconfig),
            "state_dir": str(cluster.state_dir),
            "nodes": {node.name: str(node.root) for node in cluster.nodes},
        }
        print(json.dumps(ready), flush=True)
        stop.wait()
    finally:
        cluster.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    grace = getattr(args, "node_monitor_grace_period", None)
    if grace is not None and grace < 2 * RENEW_INTERVAL:
        # As kube-controller-manager's docs ask: several kubelet heartbeats fit in the grace
        # period, or every node flaps to Unknown between two of them.
        parser.error(
            f"--node-monitor-grace-period {grace:g} is shorter than two node Lease renewals "
            f"({2 * RENEW_INTERVAL:g} s): every node would go Unknown between heartbeats"
        )
    level = getattr(args, "log_level", "WARNING")  # break-gpu has no --log-level
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "serve":
        return serve(args)
    if args.command == "join":
        return join(args)
    if args.command == "break-gpu":
        return break_gpu(args)
    return 2
