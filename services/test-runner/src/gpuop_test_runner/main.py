"""`gpuop-test-runner`: the agent (default) and `gpuop-test-runner check --recipe X` (one run)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpuop_common.config.testrunner import TestRunnerConfig
from gpuop_common.configfile import ConfigFileError, ConfigFileWatcher, load_config
from gpuop_common.kube import KubeConfigError, make_api_client
from gpuop_common.kubejson import KubeJson
from gpuop_common.logs import configure_logging
from gpuop_common.settings import parse_settings
from gpuop_common.shutdown import ServiceContext, Stopping, install_signal_handlers, run_service
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from gpuop_test_runner.agent import TestRunnerAgent, advertised_gpu_count
from gpuop_test_runner.executor import RunRequest, TestExecutor
from gpuop_test_runner.logstore import RunLogStore
from gpuop_test_runner.metrics import TestRunnerMetrics
from gpuop_test_runner.process import search_path
from gpuop_test_runner.recipes import RecipeBook, RecipeError
from gpuop_test_runner.report import Reporter
from gpuop_test_runner.results import Outcome, summary
from gpuop_test_runner.settings import CheckSettings, TestRunnerSettings
from gpuop_test_runner.toolpod import PodSite, PodTools, tools_for

if TYPE_CHECKING:
    from gpuop_common.kubelet.assignments import Assignments, PodResourcesWatcher

log = logging.getLogger(__name__)

SERVICE = "test-runner"
CONFIG_POLL_SECONDS = 5.0
STOP_WAIT_S = 20.0  # runs end within the tool kill grace once stopping; below the hard timeout
EXIT_CODES: dict[Outcome, int] = {"Passed": 0, "Failed": 1, "TimedOut": 1, "Aborted": 1, "ToolMissing": 2}
USAGE_EXIT = 2


def _api(settings: TestRunnerSettings, *, required: bool) -> client.ApiClient | None:
    if not settings.node_name:
        return None
    try:
        return make_api_client(settings.kubeconfig)
    except KubeConfigError as exc:
        if required:
            raise
        log.warning("no cluster access: results go to the log files only", extra={"error": str(exc)})
        return None


def _site(settings: TestRunnerSettings, api: client.ApiClient | None) -> PodSite | None:
    """Where tools-image pods go; None (local tools only) without a cluster, node or namespace."""
    if api is None or not settings.node_name or not settings.tools_namespace:
        return None
    secrets = tuple(s.strip() for s in settings.tools_image_pull_secrets.split(",") if s.strip())
    return PodSite(
        KubeJson(api), settings.node_name, settings.tools_namespace, settings.tools_runtime_class, secrets
    )


def _executor(  # noqa: PLR0917 (the run's inputs, each from a different place)
    settings: TestRunnerSettings,
    config: TestRunnerConfig,
    api: client.ApiClient | None,
    metrics: TestRunnerMetrics,
    stopping: Stopping,
    current: Callable[[], TestRunnerConfig] | None = None,
) -> TestExecutor:
    store = RunLogStore(settings.logs_dir or Path(config.logs_location), keep=settings.keep_runs)
    site = _site(settings, api)
    path = search_path(settings.tool_path)
    live = current or (lambda: config)
    return TestExecutor(
        host_root=settings.host_root,
        store=store,
        reporter=Reporter(api, settings.node_name, metrics, dry_run=settings.dry_run),
        stopping=stopping,
        tool_path=search_path(settings.tool_path),
        advertised_gpus=lambda: advertised_gpu_count(api, settings.node_name),
        vendor=settings.vendor,
        tools_for=lambda recipe: tools_for(recipe, live().tools_image, local_path=path, site=site),
    )


def _remove_leftover_tool_pods(site: PodSite) -> None:
    """Tools pods a killed agent left on this node hold its GPUs: they go before any new run."""
    try:
        gone = PodTools(
            site.kube, node=site.node, namespace=site.namespace, image="", setting=""
        ).remove_leftovers()
    except ApiException as exc:
        log.warning("cannot list leftover tools pods", extra={"status": exc.status})
        return
    if gone:
        log.info("deleted tools pods a previous run left", extra={"pods": gone})


def serve(ctx: ServiceContext[TestRunnerSettings], metrics: TestRunnerMetrics) -> int:
    s = ctx.settings
    if not s.node_name:
        log.error("no node name: set --node-name or NODE_NAME (the downward API's spec.nodeName)")
        return USAGE_EXIT
    try:
        api = _api(s, required=True)
    except KubeConfigError as exc:
        log.error("cannot reach the Kubernetes API", extra={"error": str(exc)})
        return 1
    watcher: ConfigFileWatcher[TestRunnerConfig] | None = None
    if s.config_file is not None:
        # A reload changes what the next run uses; a run in progress keeps the recipe it started with.
        watcher = ConfigFileWatcher.load(
            s.config_file, TestRunnerConfig, interval=CONFIG_POLL_SECONDS, node_name=s.node_name
        )
        if not s.once:
            watcher.start_in_thread(ctx.stopping)
    initial = watcher.config if watcher is not None else TestRunnerConfig()
    current = (lambda: watcher.config) if watcher is not None else TestRunnerConfig
    executor = _executor(s, initial, api, metrics, ctx.stopping, current)
    site = _site(s, api)
    if site is not None:
        _remove_leftover_tool_pods(site)
    pod_resources: list[PodResourcesWatcher] = []  # made on first use, see holders()

    def holders() -> Assignments | None:
        if not pod_resources:
            # Deferred to the first GPU to test: gRPC and the protos are ~15 MiB an idle agent never needs.
            from gpuop_common.kubelet.assignments import PodResourcesWatcher

            pod_resources.append(PodResourcesWatcher(s.pod_resources_socket))
        status = pod_resources[0].poll()
        return status.assignments if status.up else None

    agent = TestRunnerAgent(
        executor=executor,
        api=api,
        node_name=s.node_name,
        config=(lambda: watcher.config) if watcher is not None else TestRunnerConfig,
        stopping=ctx.stopping,
        vendor=s.vendor,
        holders=holders,
    )
    ctx.probes.set_ready(True)
    try:
        if s.once:
            executor.recover_unfinished()
            agent.tick()
            agent.join(float("inf"))
        else:
            agent.run(s.interval)
    finally:
        if not agent.join(STOP_WAIT_S):
            log.error("test runs still running at exit")
        agent.close()
        for lister in pod_resources:
            lister.close()
        if api is not None:
            api.close()  # type: ignore[no-untyped-call]
    return 0


def check(argv: Sequence[str]) -> int:
    """One run for an init container or a Job; exit code 0 pass, 1 fail, 2 tool missing or bad recipe."""
    s = parse_settings(CheckSettings, argv, prog="gpuop-test-runner check")
    configure_logging(s.log_level, service=SERVICE, node=s.node_name)
    try:
        config = load_config(s.config_file, TestRunnerConfig) if s.config_file else TestRunnerConfig()
        book = RecipeBook.from_config(config)
        recipe = book.get(s.recipe) if s.recipe else book.for_trigger(config)
    except (ConfigFileError, RecipeError) as exc:
        print(f"gpuop-test-runner check: error: {exc}", file=sys.stderr)
        return USAGE_EXIT
    stopping = Stopping()
    restore = install_signal_handlers(stopping)
    api = _api(s, required=False)
    try:
        executor = _executor(s, config, api, TestRunnerMetrics(), stopping)
        result = executor.run(RunRequest(recipe=recipe, trigger=s.trigger))
    finally:
        restore()
        if api is not None:
            api.close()  # type: ignore[no-untyped-call]
    print(summary(result))
    for gpu in result.gpus:
        print(f"  GPU {gpu.index} {gpu.gpu}: {gpu.result}{' - ' + gpu.detail if gpu.detail else ''}")
    if result.output_head:
        # An init container's log is often all a user sees: show what the tool said.
        print("  first lines of the tool's output:")
        for line in result.output_head:
            print(f"    {line}")
    return EXIT_CODES[result.result]


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["check"]:
        return check(args[1:])
    metrics = TestRunnerMetrics()
    return run_service(
        TestRunnerSettings,
        lambda ctx: serve(ctx, metrics),
        service=SERVICE,
        argv=args,
        registry=metrics.registry,
    )


if __name__ == "__main__":
    raise SystemExit(main())
