"""`run_identity`: the uid, groups, capabilities and no_new_privs a kubelet + containerd give a container."""

from __future__ import annotations

from typing import Any

import pytest
from gpuop_sim.workloads.simkubelet.identity import (
    DEFAULT_CAPABILITIES,
    RunIdentity,
    image_user,
    run_identity,
)
from gpuop_sim.workloads.simkubelet.podspec import ContainerConfigError
from gpuop_sim.workloads.simkubelet.process import run_as_argv

OPERATOR = "ghcr.io/gpuop/gpuop-operator:0.1.0"


def _pod(pod_context: dict[str, Any] | None = None, **container_context: Any) -> dict[str, Any]:
    container = {"name": "main", "image": OPERATOR, "securityContext": container_context}
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u-1"},
        "spec": {"securityContext": pod_context or {}, "containers": [container]},
    }


def _identity(pod: dict[str, Any], user: str = "65532:65532") -> RunIdentity:
    return run_identity(pod, pod["spec"]["containers"][0], user)


def test_image_users_come_from_the_dockerfiles_by_image_name() -> None:
    assert image_user(OPERATOR) == "65532:65532"
    assert image_user("registry:5000/gpuop/gpuop-config-manager@sha256:abc") == ""
    assert image_user("test/echo-server:1") == ""  # not one of ours: no USER, root


def test_the_image_user_applies_without_run_as_user() -> None:
    identity = _identity(_pod(privileged=True))
    assert (identity.uid, identity.gid, identity.groups) == (65532, 65532, ())
    assert identity.home == "/"


@pytest.mark.parametrize(
    ("user", "expected"), [("", (0, 0)), ("root", (0, 0)), ("1000", (1000, 0)), ("7:8", (7, 8))]
)
def test_image_user_forms(user: str, expected: tuple[int, int]) -> None:
    identity = _identity(_pod(), user)
    assert (identity.uid, identity.gid) == expected


def test_the_containers_run_as_user_wins_over_the_pods() -> None:
    identity = _identity(_pod({"runAsUser": 1000, "runAsGroup": 2000}, runAsUser=0))
    assert (identity.uid, identity.gid) == (0, 2000)
    assert identity.home == "/root"


def test_run_as_user_alone_takes_group_zero_not_the_images() -> None:
    assert _identity(_pod(runAsUser=1234)).gid == 0


def test_supplemental_groups_and_fs_group_are_extra_groups() -> None:
    identity = _identity(_pod({"supplementalGroups": [5, 6], "fsGroup": 7}))
    assert identity.groups == (5, 6, 7)


def test_run_as_non_root_refuses_an_image_that_runs_as_root() -> None:
    with pytest.raises(ContainerConfigError) as raised:
        _identity(_pod({"runAsNonRoot": True}), user="")
    assert raised.value.reason == "CreateContainerConfigError"
    assert raised.value.message == (
        'container has runAsNonRoot and image will run as root (pod: "p_ns(u-1)", container: main)'
    )


def test_run_as_non_root_refuses_run_as_user_zero() -> None:
    with pytest.raises(ContainerConfigError, match="container's runAsUser breaks non-root policy"):
        _identity(_pod({"runAsNonRoot": True}, runAsUser=0))


def test_run_as_non_root_accepts_a_non_root_image_user() -> None:
    assert _identity(_pod(runAsNonRoot=True)).uid == 65532


def test_default_capabilities_minus_drop_plus_add() -> None:
    assert _identity(_pod()).capabilities == DEFAULT_CAPABILITIES
    identity = _identity(_pod(capabilities={"drop": ["NET_RAW", "CAP_KILL"], "add": ["SYS_ADMIN"]}))
    assert identity.capabilities == (DEFAULT_CAPABILITIES - {"NET_RAW", "KILL"}) | {"SYS_ADMIN"}


def test_drop_all_then_add() -> None:
    assert _identity(_pod(capabilities={"drop": ["ALL"]})).capabilities == frozenset()
    assert _identity(_pod(capabilities={"drop": ["ALL"], "add": ["NET_ADMIN"]})).capabilities == {"NET_ADMIN"}


def test_privileged_gets_every_capability_but_a_non_root_uid_uses_none() -> None:
    privileged = _identity(_pod(privileged=True))
    assert privileged.capabilities is None
    assert privileged.effective_capabilities == frozenset()
    as_root = _identity(_pod(privileged=True, runAsUser=0))
    assert as_root.effective_capabilities is None


def test_allow_privilege_escalation_false_sets_no_new_privs() -> None:
    assert _identity(_pod(allowPrivilegeEscalation=False)).no_new_privs
    assert not _identity(_pod()).no_new_privs
    assert not _identity(_pod(allowPrivilegeEscalation=True)).no_new_privs


def test_setpriv_argv() -> None:
    identity = RunIdentity(65532, 65532, (7,), frozenset({"CHOWN", "SYS_CHROOT"}), no_new_privs=True)
    argv = run_as_argv(identity, ["prog", "--x"])
    assert argv[1:] == [
        "--reuid=65532",
        "--regid=65532",
        "--groups=7",
        "--bounding-set=-all,+chown,+sys_chroot",
        "--inh-caps=-all",
        "--no-new-privs",
        "--",
        "prog",
        "--x",
    ]
    privileged = run_as_argv(RunIdentity(0, 0, (), None, no_new_privs=False), ["prog"])
    assert "--clear-groups" in privileged
    assert not any(a.startswith("--bounding-set") for a in privileged)
