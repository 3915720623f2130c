"""A filter that cannot apply or verify its ruleset starts no session, and says why."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest

from dejima.adapters.fifo import make_gate
from dejima.adapters.host import launcher_token
from dejima.adapters.runtime import Runtime
from dejima.core.paths import FILTER_CONFIG_ENV
from dejima.core.plan import Identity, SessionPlan, SessionRequest, build_session_plan
from dejima.core.settings import Settings
from dejima.errors import FilterError
from dejima.orchestration import session
from dejima.ui.console import UI
from tests.integration.conftest import Images
from tests.world import User, containers_of


def make_plan(images: Images, scope: str, workspace: Path, user: User) -> SessionPlan:
    session_id = os.urandom(4).hex()
    # Gated, as the launcher runs it: the session's container starts while the filter is still
    # being verified, so "never ran" below holds the gate to its promise.
    gate = make_gate(workspace.parent / f"gate-{session_id}")
    request = SessionRequest(
        session_id=session_id, scope=scope, workspace=PurePosixPath(workspace),
        home_dir=PurePosixPath(workspace / ".home"), command=("touch", str(workspace / "session-ran")),
        launcher=launcher_token(), gate_dir=PurePosixPath(gate.parent),
    )
    (workspace / ".home").mkdir(exist_ok=True)
    if os.getuid() == 0:
        os.chown(workspace / ".home", user.uid, user.gid)
    identity = Identity(user.uid, user.gid, "dejima")
    image = images.session if user.uid != os.getuid() else images.session_root
    return build_session_plan(request, Settings(), identity, images.filter, image)


def with_filter_config(plan: SessionPlan, **changes: object) -> SessionPlan:
    config = json.loads(plan.filter.environment[FILTER_CONFIG_ENV])
    config.update(changes)
    environment = {FILTER_CONFIG_ENV: json.dumps(config)}
    return replace(plan, filter=replace(plan.filter, environment=environment))


def run_expecting_filter_error(runtime: Runtime, plan: SessionPlan, workspace: Path, scope: str) -> FilterError:
    with pytest.raises(FilterError) as caught:
        session.run(runtime, plan, UI(quiet=True), ready_timeout=30, stop_timeout=5)
    assert not (workspace / "session-ran").exists(), "the session ran behind an unverified filter"
    assert containers_of(runtime, scope, session=plan.session_id) == []
    return caught.value


def test_working_plan_runs_the_session(runtime: Runtime, images: Images, user: User, scope: str,
                                       workspace: Path) -> None:
    """The control for the cases below: the unmodified plan does run its command."""
    plan = make_plan(images, scope, workspace, user)
    assert session.run(runtime, plan, UI(quiet=True), ready_timeout=30, stop_timeout=5) == 0
    assert (workspace / "session-ran").exists()


def test_ruleset_the_kernel_refuses_starts_nothing(runtime: Runtime, images: Images, user: User, scope: str,
                                                   workspace: Path) -> None:
    plan = make_plan(images, scope, workspace, user)
    broken = with_filter_config(plan, ruleset=plan.ruleset.replace("policy drop;", "policy dorp;", 1))
    error = run_expecting_filter_error(runtime, broken, workspace, scope)
    assert "could not apply its ruleset" in error.message
    assert "nft refused the ruleset" in error.message


def test_filter_without_net_admin_starts_nothing(runtime: Runtime, images: Images, user: User, scope: str,
                                                 workspace: Path) -> None:
    plan = make_plan(images, scope, workspace, user)
    weakened = replace(plan, filter=replace(plan.filter, cap_add=()))
    error = run_expecting_filter_error(runtime, weakened, workspace, scope)
    assert "Operation not permitted" in error.message


def test_read_back_that_differs_from_the_expectation_starts_nothing(runtime: Runtime, images: Images, user: User,
                                                                    scope: str, workspace: Path) -> None:
    plan = make_plan(images, scope, workspace, user)
    expect = plan.expectation.to_json()
    expect["chains"][0]["policy"] = "accept"  # type: ignore[index]
    error = run_expecting_filter_error(runtime, with_filter_config(plan, expect=expect), workspace, scope)
    assert "chain output: kernel has hook=output policy=drop, expected hook=output policy=accept" in error.message


def test_filter_that_dies_before_ready_starts_nothing(runtime: Runtime, images: Images, user: User, scope: str,
                                                      workspace: Path) -> None:
    plan = make_plan(images, scope, workspace, user)
    crashing = replace(plan, filter=replace(plan.filter, environment={}))
    error = run_expecting_filter_error(runtime, crashing, workspace, scope)
    assert "no configuration" in error.message


def test_filter_given_another_ruleset_than_planned_starts_nothing(runtime: Runtime, images: Images, user: User,
                                                                   scope: str, workspace: Path) -> None:
    """An output chain that is a single accept applies and reads back as itself; the launcher still
    refuses it, because the filter's ready line names a ruleset other than the planned one."""
    plan = make_plan(images, scope, workspace, user)
    start = plan.ruleset.index("\tchain output {")
    end = plan.ruleset.index("\t}", start)
    gutted = (plan.ruleset[:start] + "\tchain output {\n\t\ttype filter hook output priority filter; policy drop;\n"
              "\t\taccept\n" + plan.ruleset[end:])
    error = run_expecting_filter_error(runtime, with_filter_config(plan, ruleset=gutted), workspace, scope)
    assert "verified a ruleset other than the planned one" in error.message


def test_kernel_listing_that_differs_from_the_ruleset_starts_nothing(runtime: Runtime, images: Images, user: User,
                                                                     scope: str, workspace: Path) -> None:
    """The filter compares the kernel's whole listing with the text it applied: here nft lists the
    reject differently from how it was written, so the filter must not report ready."""
    plan = make_plan(images, scope, workspace, user)
    reworded = plan.ruleset.replace("reject with icmpx admin-prohibited", "reject with icmpx type admin-prohibited")
    assert reworded != plan.ruleset
    error = run_expecting_filter_error(runtime, with_filter_config(plan, ruleset=reworded), workspace, scope)
    assert "the kernel's listing differs from the ruleset" in error.message


def test_namespace_without_the_privileged_port_floor_starts_nothing(runtime: Runtime, images: Images, user: User,
                                                                    scope: str, workspace: Path) -> None:
    """The filter's listeners are only safe from squatting while low ports stay privileged."""
    plan = make_plan(images, scope, workspace, user)
    sysctls = {k: v for k, v in plan.filter.sysctls.items() if "unprivileged_port_start" not in k}
    assert sysctls != plan.filter.sysctls
    error = run_expecting_filter_error(runtime, replace(plan, filter=replace(plan.filter, sysctls=sysctls)),
                                       workspace, scope)
    assert "ports below 1024 are not privileged" in error.message
