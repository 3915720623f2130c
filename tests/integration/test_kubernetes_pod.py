"""The rendered pod shape is not a toy: `dejima PATH --render pod`, run on the local engine the way a
kubelet runs it (tests/kubelet.py: one network namespace, the filter sidecar started and its startup
probe passed before the session starts), keeps the boundary the local pair keeps, against the egress
test world (tests/networld.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dejima.core import labels
from tests.integration.conftest import Images
from tests.kubelet import LocalPod, inspect, run_container, start_pod
from tests.networld import World, queries_seen
from tests.world import User, docker, run_dejima

CLAIM = "test-workspace"


def render(user: User, scope: str, workspace: Path, world: World, images: Images, *args: str,
           form: str = "pod") -> list[dict[str, Any]]:
    settings = workspace.parent / f"k8s-{workspace.name}.toml"
    settings.write_text(world.settings.read_text() + (
        f'\n[kubernetes]\nfilter_image = "{images.filter}"\nsession_image = "{images.session}"\n'
        f'dns_upstreams = ["{world.dns}"]\nworkspace_claim = "{CLAIM}"\n'))
    settings.chmod(0o644)
    result = run_dejima(user, scope, str(workspace), "--render", form, *args, DEJIMA_SETTINGS=str(settings))
    assert result.returncode == 0, result.stderr
    return list(yaml.safe_load_all(result.stdout))


@pytest.fixture
def pods(world: World, workspace: Path, scope: str) -> Iterator[list[LocalPod]]:
    started: list[LocalPod] = []
    yield started
    for pod in started:
        pod.delete()


def run_pod(objects: list[dict[str, Any]], scope: str, world: World, workspace: Path,
            pods: list[LocalPod]) -> tuple[LocalPod, list[dict[str, Any]]]:
    pod = start_pod(objects, scope, world.network, {CLAIM: workspace})
    pods.append(pod)
    result = run_container(pod, objects, {CLAIM: workspace})
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    lines = [line for line in result.stdout.decode().splitlines() if line.startswith("[")]
    output: list[dict[str, Any]] = json.loads(lines[-1])
    return pod, output


def tcp(host: str, port: int) -> dict[str, object]:
    return {"op": "tcp", "host": host, "port": port}


def test_the_pod_allows_what_the_policy_allows_and_nothing_else(user: User, scope: str, workspace: Path,
                                                                world: World, images: Images,
                                                                pods: list[LocalPod]) -> None:
    objects = render(user, scope, workspace, world, images, "--allow", "web.dejima.test:8080", "--",
                     *world.probe({"op": "resolve", "name": "web.dejima.test"}, tcp("web.dejima.test", 8080),
                                  tcp("web.dejima.test", 8443), tcp(world.other, 8080),
                                  {"op": "dns", "name": "web.dejima.test", "server": world.dns},
                                  {"op": "resolve", "name": "bad.wild.dejima.test"},
                                  {"op": "resolve", "name": "other.dejima.test"},
                                  {"op": "ipv6"}, {"op": "icmp", "host": world.other}))
    _, (resolved, allowed, other_port, other_host, direct_dns, denied, unlisted, ipv6, icmp) = run_pod(
        objects, scope, world, workspace, pods)
    assert resolved == {"result": "resolved", "addresses": [world.web]}
    assert allowed["result"] == "connected" and allowed["data"].startswith("HTTP/1.0 200")  # the control
    assert other_port["result"] == "blocked"
    assert other_host["result"] == "blocked"
    assert direct_dns["result"] in ("blocked", "timeout")  # only the filter's marked sockets reach the upstream
    assert denied["result"] == "failed" and unlisted["result"] == "failed"
    assert "bad.wild.dejima.test" not in queries_seen_by(world) and "other.dejima.test" not in queries_seen_by(world)
    assert ipv6["result"] == "blocked" and icmp["result"] != "answered"


def queries_seen_by(world: World) -> list[str]:
    from dejima.adapters.runtime import connect

    return queries_seen(connect(), world)


@pytest.mark.parametrize("form", ["pod", "kubernetes"])  # a Sandbox's pod template is the same pod
def test_a_pod_with_no_egress_reaches_nothing(form: str, user: User, scope: str, workspace: Path, world: World,
                                              images: Images, pods: list[LocalPod]) -> None:
    objects = render(user, scope, workspace, world, images, "--",
                     *world.probe(tcp(world.web, 8080), {"op": "resolve", "name": "web.dejima.test"},
                                  {"op": "udp", "host": world.web, "port": 53}), form=form)
    assert objects[2]["kind"] == {"pod": "Pod", "kubernetes": "Sandbox"}[form]
    _, (web, name, udp) = run_pod(objects, scope, world, workspace, pods)
    assert web["result"] == "blocked" and name["result"] == "failed" and udp["result"] != "answered"


def test_with_the_filter_gone_the_boundary_stays(user: User, scope: str, workspace: Path, world: World,
                                                 images: Images, pods: list[LocalPod]) -> None:
    """On a cluster the filter's death does not end the session (no shared PID namespace): the ruleset
    stays in the pod's namespace, so nothing new gets out, and no name resolves."""
    objects = render(user, scope, workspace, world, images, "--allow", "web.dejima.test:8080", "--",
                     *world.probe(tcp(world.other, 8080), {"op": "resolve", "name": "web.dejima.test"},
                                  tcp(world.web, 8080)))
    pod = start_pod(objects, scope, world.network, {CLAIM: workspace})
    pods.append(pod)
    assert docker("kill", pod.containers["filter"]).returncode == 0
    assert inspect(pod.containers["filter"])["State"]["Running"] is False
    result = run_container(pod, objects, {CLAIM: workspace})
    other, name, web = json.loads(result.stdout.decode().splitlines()[-1])
    assert other["result"] == "blocked" and web["result"] == "blocked"  # web was never resolved: not in a set
    assert name["result"] == "failed"


def test_the_session_container_runs_as_rendered(user: User, scope: str, workspace: Path, world: World,
                                                images: Images, pods: list[LocalPod]) -> None:
    objects = render(user, scope, workspace, world, images, "--", "sh", "-c",
                     "id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; touch /usr/x 2>&1 || true; "
                     "cat /etc/resolv.conf; touch \"$PWD/written\" && echo wrote")
    pod = start_pod(objects, scope, world.network, {CLAIM: workspace})
    pods.append(pod)
    result = run_container(pod, objects, {CLAIM: workspace})
    out = result.stdout.decode()
    assert out.splitlines()[0] == str(user.uid)
    assert "CapEff:\t0000000000000000" in out and "NoNewPrivs:\t1" in out
    assert "Read-only file system" in out and "nameserver 127.0.0.1" in out and "wrote" in out
    assert (workspace / "written").exists()
    assert inspect(pod.containers["filter"])["Config"]["Labels"][labels.SCOPE] == scope
