"""`kubectl gpuop status|doctor|must-gather` (console script `kubectl-gpuop`; kubectl runs any
`kubectl-<name>` on PATH as `kubectl <name>`).

Kubeconfig as kubectl finds it: `--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`; `--context`
picks a context. `-n` is gpuop's namespace (the operator's and the operands'), default `gpu-operator`.
Exit codes: 0 fine, 1 a node is not serving GPUs (doctor), 2 usage or connection errors.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from gpuop_common.kubejson import KubeJson
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from rich.console import Console
from urllib3.exceptions import HTTPError

from gpuop_kubectl.doctor import diagnose_all
from gpuop_kubectl.gather import bundle_files, write_bundle
from gpuop_kubectl.report import render_reports
from gpuop_kubectl.snapshot import read_snapshot
from gpuop_kubectl.table import node_rows, render

DEFAULT_NAMESPACE = "gpu-operator"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kubectl gpuop", description="gpuop: status, doctor, must-gather")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", help="kubeconfig context to use")
    parser.add_argument("-n", "--namespace", default=DEFAULT_NAMESPACE, help="gpuop's namespace")
    commands = parser.add_subparsers(dest="command", required=True)
    status = commands.add_parser("status", help="one table of every GPU node")
    status.add_argument("-o", "--output", choices=("table", "wide", "json"), default="table")
    status.add_argument("-w", "--watch", action="store_true", help="print the table again on each change")
    status.add_argument("--interval", type=float, default=2.0, help="seconds between reads with -w")
    doctor = commands.add_parser("doctor", help="why a node does (not) offer GPUs")
    doctor.add_argument("nodes", nargs="*", metavar="NODE", help="nodes to check (default: every GPU node)")
    doctor.add_argument("-o", "--output", choices=("text", "json"), default="text")
    gather = commands.add_parser("must-gather", help="a support bundle (tar.gz), secrets left out")
    gather.add_argument("--output", type=Path, required=True, metavar="FILE.tar.gz")
    return parser


def api_client(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    # persist_config=False: never write refreshed tokens back into the user's kubeconfig.
    return config.new_client_from_config(config_file=kubeconfig, context=context, persist_config=False)  # type: ignore[no-untyped-call,no-any-return]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console() if sys.stdout.isatty() else Console(width=240)
    try:
        api = api_client(args.kubeconfig, args.context)
    except (ConfigException, OSError, TypeError) as error:
        print(f"kubectl gpuop: cannot load the kubeconfig: {error}", file=sys.stderr)
        return 2
    kube = KubeJson(api, timeout=15)
    try:
        if args.command == "status":
            return status(kube, args, console)
        if args.command == "doctor":
            return doctor(kube, args)
        return must_gather(kube, args)
    except (HTTPError, OSError) as error:
        print(f"kubectl gpuop: cannot reach the API server: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    finally:
        api.close()  # type: ignore[no-untyped-call]


def status(kube: KubeJson, args: argparse.Namespace, console: Console) -> int:
    last = None
    while True:
        snap = read_snapshot(kube, args.namespace, logs=False)
        rows = node_rows(snap.gpu_nodes, snap.pods, snap.slices)
        if rows != last:
            if args.output == "json":
                print(json.dumps([r.to_json() for r in rows], indent=2))
            else:
                console.print(render(rows, metrics=args.output == "wide"))
            for line in dict.fromkeys(snap.unreadable):
                print(f"could not read: {line}", file=sys.stderr)
            last = rows
        if not args.watch:
            return 0
        time.sleep(args.interval)


def doctor(kube: KubeJson, args: argparse.Namespace) -> int:
    snap = read_snapshot(kube, args.namespace)
    reports = diagnose_all(snap, args.nodes)
    if args.output == "json":
        print(json.dumps({"nodes": [r.to_json() for r in reports], "unreadable": snap.unreadable}, indent=2))
    else:
        print(render_reports(reports, snap), end="")
    return 0 if all(r.ok for r in reports) else 1


def must_gather(kube: KubeJson, args: argparse.Namespace) -> int:
    snap = read_snapshot(kube, args.namespace)
    files = bundle_files(kube, snap)
    path = write_bundle(args.output, files)
    print(f"wrote {path} ({len(files)} files)")
    for line in dict.fromkeys(snap.unreadable):
        print(f"could not read: {line}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
