"""The config manager's pass over its node: select a profile, check it, and apply it safely.

States (label `gpuop.dev/gpu-config-state`): pending -> quiescing -> applying -> success | failed.
- Nothing is written while the GPUs already match the selected profile (steady state: zero writes).
- An unknown or invalid profile fails with the reason before anything on the node changes.
- Quiescing pauses the operands' deploy labels (gpuop_common.operandpause, reason `config-change`)
  and waits for their pods and for GPU pods to leave; on timeout the labels are restored and the
  state is `failed`.
- Applying writes each GPU through gpuop_common, then re-reads the GPUs to verify. A memory
  partition the driver takes as a request for its next load is put in force by reloading amdgpu
  (`modprobe -r amdgpu; modprobe amdgpu`, the GPUs still quiesced; phase `reloading` on the Node
  first), then the writes that had to wait for it. A failed write or reload leaves the node with
  its operands restored and the driver's reason in the annotation.
- The progress annotation, written before the first label is paused, lets a restarted agent resume
  the same profile, or roll the pause back when the node now asks for something else.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from gpuop_common.config.config_manager import ConfigManagerConfig, PartitionProfile
from gpuop_common.gpu.errors import GpuBackendError
from gpuop_common.gpu.models import Vendor
from gpuop_common.gpu.profile_check import GpuTarget
from gpuop_common.shutdown import Stopping

from gpuop_config_manager import labels as meta
from gpuop_config_manager.gpus import NodeGpus
from gpuop_config_manager.kubeio import NodeClient, NodeMeta
from gpuop_config_manager.metrics import ConfigManagerMetrics
from gpuop_config_manager.pods import blocking, evictable
from gpuop_config_manager.progress import Progress, Result, parse_progress, parse_result

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    state: meta.State | None  # None: the node asks for no profile
    changed: bool  # GPUs were written
    reason: str = ""


class QuiesceTimeoutError(Exception):
    pass


class StoppedError(Exception):
    pass


class ConfigManagerAgent:
    def __init__(
        self,
        *,
        kube: NodeClient,
        gpus: NodeGpus,
        config: Callable[[], ConfigManagerConfig],
        stopping: Stopping | None = None,
        poll_seconds: float = 2.0,
        evict_gpu_pods: bool = False,
        metrics: ConfigManagerMetrics | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.gpus = gpus
        self.config = config
        self.stopping = stopping or Stopping()
        self.poll_seconds = poll_seconds
        self.evict_gpu_pods = evict_gpu_pods
        self.metrics = metrics or ConfigManagerMetrics()
        self.clock = clock

    # one pass --------------------------------------------------------------------------------
    def run_once(self) -> Outcome:
        node = self.kube.read()
        config = self.config()
        selection = meta.select_profile(node.labels, config)
        progress = parse_progress(node.annotations.get(meta.PROGRESS_ANNOTATION))
        profile = next((p for p in config.profiles if p.name == selection.name), None)
        if progress is not None:
            if profile is not None and (progress.profile, progress.digest) == (
                profile.name,
                meta.profile_digest(profile),
            ):
                log.info(
                    "resuming an interrupted apply", extra={"profile": profile.name, "phase": progress.phase}
                )
                self.kube.event(
                    node,
                    "ConfigResumed",
                    f"profile {profile.name}: resuming after a restart ({progress.phase})",
                )
                return self._apply(node, profile, config, progress)
            if progress.phase == "reloading":
                self._finish_reload()
            node = self._roll_back(node, progress, "the node now asks for another profile")
        if selection.name is None:
            return Outcome(None, False)
        if profile is None:
            known = ", ".join(p.name for p in config.profiles) or "none"
            asked = f"profile {selection.name!r} (label {selection.source})"
            reason = f"{asked} is not in the config (profiles: {known})"
            return self._fail(node, reason, "InvalidProfile", digest="")
        digest = meta.profile_digest(profile)
        plan = self.gpus.plan(profile)
        if not plan.valid:
            return self._fail(node, "; ".join(plan.reasons), "InvalidProfile", profile=profile, digest=digest)
        todo = self.gpus.pending(plan)
        if not todo:
            return self._succeed(node, profile, digest, changed=False)
        last = parse_result(node.annotations.get(meta.RESULT_ANNOTATION))
        if (
            last is not None
            and last.state == meta.State.FAILED
            and (last.profile, last.digest) == (profile.name, digest)
        ):
            # Failed before: retried when the label or the profile changes, not in a loop.
            return Outcome(meta.State.FAILED, False, node.annotations.get(meta.REASON_ANNOTATION, ""))
        return self._start(node, profile, config, todo)

    # transitions -----------------------------------------------------------------------------
    def _vendors(self) -> list[Vendor]:
        return self.gpus.vendors()

    def _set_state(
        self,
        node: NodeMeta,
        state: meta.State,
        *,
        labels: dict[str, str | None] | None = None,
        annotations: dict[str, str | None] | None = None,
    ) -> NodeMeta:
        wanted = {**meta.state_labels(state, self._vendors()), **(labels or {})}
        label_patch = {k: v for k, v in wanted.items() if node.labels.get(k) != v}
        ann_patch = {k: v for k, v in (annotations or {}).items() if node.annotations.get(k) != v}
        self.kube.patch(label_patch, ann_patch)
        self.metrics.state.labels(state=state.value).set(1)
        for other in meta.State:
            if other is not state:
                self.metrics.state.labels(state=other.value).set(0)
        return _patched(node, label_patch, ann_patch)

    def _fail(
        self, node: NodeMeta, reason: str, event: str, *, profile: PartitionProfile | None = None, digest: str
    ) -> Outcome:
        reason = meta.clip_reason(reason)
        name = (
            profile.name
            if profile is not None
            else meta.select_profile(node.labels, self.config()).name or ""
        )
        result = Result(profile=name, digest=digest, state=meta.State.FAILED.value).dump()
        already = (
            node.labels.get(meta.STATE_LABEL) == meta.State.FAILED
            and node.annotations.get(meta.REASON_ANNOTATION) == reason
        )
        self._set_state(
            node,
            meta.State.FAILED,
            annotations={meta.REASON_ANNOTATION: reason, meta.RESULT_ANNOTATION: result},
        )
        if not already:
            log.warning("configuration failed", extra={"reason": reason})
            self.kube.event(node, event, reason, "Warning")
            self.metrics.applies.labels(result="failed").inc()
        return Outcome(meta.State.FAILED, False, reason)

    def _succeed(
        self,
        node: NodeMeta,
        profile: PartitionProfile,
        digest: str,
        *,
        changed: bool,
        labels: dict[str, str | None] | None = None,
        annotations: dict[str, str | None] | None = None,
    ) -> Outcome:
        """`success`, with the restored deploy labels (and the pause's end) in the same patch."""
        result = Result(profile=profile.name, digest=digest, state=meta.State.SUCCESS.value).dump()
        already = (
            node.labels.get(meta.STATE_LABEL) == meta.State.SUCCESS
            and node.annotations.get(meta.RESULT_ANNOTATION) == result
        )
        self._set_state(
            node,
            meta.State.SUCCESS,
            labels=labels,
            annotations={
                meta.REASON_ANNOTATION: None,
                meta.RESULT_ANNOTATION: result,
                meta.PROGRESS_ANNOTATION: None,
                **(annotations or {}),
            },
        )
        if not already:
            if changed:
                self.kube.event(node, "ConfigApplied", f"profile {profile.name} applied and verified")
                self.metrics.applies.labels(result="success").inc()
            else:
                self.kube.event(node, "ConfigAlreadyApplied", f"profile {profile.name}: GPUs already match")
        return Outcome(meta.State.SUCCESS, changed)

    def _roll_back(self, node: NodeMeta, progress: Progress, why: str) -> NodeMeta:
        restore, done = meta.PAUSE.resume(node.labels, node.annotations)
        self.kube.patch(restore, {meta.PROGRESS_ANNOTATION: None, **done})
        self.kube.event(
            node, "ConfigRolledBack", f"profile {progress.profile}: pause undone ({why})", "Warning"
        )
        return _patched(node, restore, {meta.PROGRESS_ANNOTATION: None, **done})

    def _start(
        self, node: NodeMeta, profile: PartitionProfile, config: ConfigManagerConfig, todo: list[GpuTarget]
    ) -> Outcome:
        now = self.gpus.describe(todo)
        changes = ", ".join(
            f"{t.vendor.value} GPU {t.index} {was} -> {t.describe}" for t, was in zip(todo, now, strict=True)
        )
        node = self._set_state(node, meta.State.PENDING, annotations={meta.REASON_ANNOTATION: None})
        self.kube.event(node, "ConfigPending", f"profile {profile.name}: {changes}")
        patch, listed = meta.PAUSE.pause(node.labels, node.annotations, config.paused_operands)
        progress = Progress(
            profile=profile.name, digest=meta.profile_digest(profile), phase="quiescing", started=self.clock()
        )
        node = self._set_state(
            node,
            meta.State.QUIESCING,
            labels=patch,
            annotations={meta.PROGRESS_ANNOTATION: progress.dump(), **listed},
        )
        paused = ", ".join(sorted(patch)) or "none"
        self.kube.event(
            node, "Quiescing", f"profile {profile.name}: paused {paused}; waiting for GPU pods to leave"
        )
        return self._apply(node, profile, config, progress)

    def _apply(
        self, node: NodeMeta, profile: PartitionProfile, config: ConfigManagerConfig, progress: Progress
    ) -> Outcome:
        started = self.clock()
        if progress.phase == "quiescing":
            try:
                self._quiesce(config, progress)
            except QuiesceTimeoutError as exc:
                return self._finish_failed(node, progress, str(exc), "QuiesceTimeout")
            except StoppedError:
                self._roll_back(node, progress, "the agent is stopping")
                return Outcome(meta.State.PENDING, False, "stopped while quiescing")
            progress = progress.model_copy(update={"phase": "applying"})
        node = self._set_state(
            node, meta.State.APPLYING, annotations={meta.PROGRESS_ANNOTATION: progress.dump()}
        )
        try:
            if progress.phase == "reloading":  # a restart found the driver reload it had begun
                self.gpus.reload_amd_driver(load_only=True)
                progress = progress.model_copy(update={"phase": "applying"})
            self.kube.event(node, "ApplyingConfig", f"profile {profile.name}: writing the GPUs")
            if self._write(profile):
                node = self._reload(node, profile, progress)
                if self._write(profile):
                    raise GpuBackendError("a memory partition is still pending after a driver reload")
            left = self.gpus.pending(self.gpus.plan(profile))
            if left:
                now = self.gpus.describe(left)
                wrong = ", ".join(
                    f"GPU {t.index} is {was}, wanted {t.describe}" for t, was in zip(left, now, strict=True)
                )
                raise GpuBackendError(f"verify failed after apply: {wrong}")
        except GpuBackendError as exc:
            return self._finish_failed(node, progress, str(exc), "ConfigFailed")
        self.metrics.apply_seconds.observe(self.clock() - started)
        restore, done = meta.PAUSE.resume(node.labels, node.annotations)
        return self._succeed(node, profile, progress.digest, changed=True, labels=restore, annotations=done)

    def _write(self, profile: PartitionProfile) -> bool:
        """Write every GPU that does not match yet; True when a memory partition waits for a
        driver reload (checked against the GPUs as they are now, so it also runs after one)."""
        plan = self.gpus.plan(profile)
        if not plan.valid:
            raise GpuBackendError("; ".join(plan.reasons))
        reload_needed = False
        for target in self.gpus.pending(plan):
            reload_needed |= self.gpus.apply(target)
        return reload_needed

    def _finish_reload(self) -> None:
        """Load amdgpu again after a restart in the middle of a reload, before giving the GPUs
        back to the operands (the unload may have happened)."""
        try:
            self.gpus.reload_amd_driver(load_only=True)
        except GpuBackendError as exc:
            log.warning("loading amdgpu after an interrupted reload failed", extra={"error": str(exc)})

    def _reload(self, node: NodeMeta, profile: PartitionProfile, progress: Progress) -> NodeMeta:
        """Reload amdgpu (the GPUs are quiesced), recording it first so a restart finishes it."""
        reloading = progress.model_copy(update={"phase": "reloading"})
        node = self._set_state(
            node, meta.State.APPLYING, annotations={meta.PROGRESS_ANNOTATION: reloading.dump()}
        )
        self.kube.event(
            node,
            "ReloadingDriver",
            f"profile {profile.name}: the memory partition takes effect at a driver reload: reloading amdgpu",
        )
        self.gpus.reload_amd_driver()
        return node  # `reloading` stays recorded until the end: a resumed load is a no-op

    def _restore(self, node: NodeMeta) -> NodeMeta:
        restore, done = meta.PAUSE.resume(node.labels, node.annotations)
        if restore or done:
            self.kube.patch(restore, done)
        return _patched(node, restore, done)

    def _finish_failed(self, node: NodeMeta, progress: Progress, reason: str, event: str) -> Outcome:
        node = self._restore(node)
        profile = next((p for p in self.config().profiles if p.name == progress.profile), None)
        outcome = self._fail(node, reason, event, profile=profile, digest=progress.digest)
        self.kube.patch(None, {meta.PROGRESS_ANNOTATION: None})
        return outcome

    def _quiesce(self, config: ConfigManagerConfig, progress: Progress) -> None:
        deadline = progress.started + config.quiesce_timeout_seconds
        evicted: set[str] = set()
        while True:
            pods = self.kube.pods()
            left = blocking(pods, config.paused_operands)
            if not left:
                return
            if self.evict_gpu_pods:
                for pod in evictable(left):
                    if pod.ref not in evicted:
                        self.kube.delete_pod(pod)
                        evicted.add(pod.ref)
            if self.clock() >= deadline:
                names = ", ".join(p.described for p in left[:10])
                more = f" and {len(left) - 10} more" if len(left) > 10 else ""
                waited = config.quiesce_timeout_seconds
                raise QuiesceTimeoutError(
                    f"timed out after {waited}s waiting for pods to leave the node: {names}{more}"
                )
            if self.stopping.wait(self.poll_seconds):
                raise StoppedError


def _patched(node: NodeMeta, labels: dict[str, str | None], annotations: dict[str, str | None]) -> NodeMeta:
    """The node as it reads after a merge-patch of its labels and annotations (None removes)."""
    new_labels = {k: v for k, v in {**node.labels, **labels}.items() if v is not None}
    new_ann = {k: v for k, v in {**node.annotations, **annotations}.items() if v is not None}
    return NodeMeta(node.name, node.uid, new_labels, new_ann)
