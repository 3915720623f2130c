"""The rendered pod shape is not a toy: `dejima PATH --render pod`, run on the local engine the way a
kubelet runs it (tests/kubelet.py: one network namespace, the filter sidecar started and its startup
probe passed before the session starts), keeps the boundary the local pair keeps, against the egress
test world (tests/networld.py)."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dejima.core import labels
from dejima.core.kubernetes import PROXY_UID
from tests.integration.conftest import Images
from tests.kubelet import LocalPod, inspect, run_container, start_container, start_pod
from tests.networld import World, queries_seen
from tests.world import User, docker, run_dejima, wait_for_line

CLAIM = "test-workspace"


def rendered(user: User, scope: str, workspace: Path, world: World, images: Images, args: tuple[str, ...],
             form: str = "pod", extra: str = "") -> subprocess.CompletedProcess[str]:
    """`dejima WORKSPACE --render FORM ARGS` with the world's settings, a [kubernetes] section naming the
    test's images and the world's DNS, and ``extra`` settings."""
    settings = workspace.parent / f"k8s-{workspace.name}.toml"
    settings.write_text(world.settings.read_text() + (
        f'\n[kubernetes]\nfilter_image = "{images.filter}"\nsession_image = "{images.session}"\n'
        f'dns_upstreams = ["{world.dns}"]\nworkspace_claim = "{CLAIM}"\n') + extra)
    settings.chmod(0o644)
    result = run_dejima(user, scope, str(workspace), "--render", form, *args, DEJIMA_SETTINGS=str(settings))
    assert result.returncode == 0, result.stderr
    return result


def render(user: User, scope: str, workspace: Path, world: World, images: Images, *args: str,
           form: str = "pod") -> list[dict[str, Any]]:
    return list(yaml.safe_load_all(rendered(user, scope, workspace, world, images, args, form).stdout))


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
    result = run_container(pod, objects)
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
    result = run_container(pod, objects)
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
    result = run_container(pod, objects)
    out = result.stdout.decode()
    assert out.splitlines()[0] == str(user.uid)
    assert "CapEff:\t0000000000000000" in out and "NoNewPrivs:\t1" in out
    assert "Read-only file system" in out and "nameserver 127.0.0.1" in out and "wrote" in out
    assert (workspace / "written").exists()
    assert inspect(pod.containers["filter"])["Config"]["Labels"][labels.SCOPE] == scope


# --- the pod's credential proxy ---------------------------------------------------------------------

TOKEN = "ghp_REALrealREALrealREALrealREALreal0123"  # the cluster's Secret; never the session's
ROUTE_PORT = 8443  # the route's upstream port: the fake upstream's in the pod, and a decoy's on the world
FAKE_UPSTREAM = r"""
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        print("request", self.path, self.headers.get("Authorization", "-"), flush=True)
        self.send_response(404); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
print("listening", flush=True)
server.serve_forever()
"""


def render_with_routes(user: User, scope: str, workspace: Path, world: World, images: Images,
                       *command: str) -> list[dict[str, Any]]:
    """A render whose github routes (the forge's) go to a fake upstream on the pod's loopback."""
    result = rendered(user, scope, workspace, world, images, ("--forge", "github", "--", *command), extra=(
        f'\n[credentials]\nupstreams = {{ github-git = "http://127.0.0.1:{ROUTE_PORT}", '
        f'github-api = "http://127.0.0.1:{ROUTE_PORT}" }}\n'))
    assert "kubectl" in result.stderr and "create secret generic" in result.stderr  # the one object not rendered
    return list(yaml.safe_load_all(result.stdout))


def fake_upstream_in(pod: LocalPod, image: str) -> str:
    """An upstream on the pod's loopback (where only a route override can point), printing what reached it;
    its container's name, once it listens."""
    name = f"{pod.name}-upstream"
    pod.containers[name] = name
    started = docker("run", "-d", "--name", name, "--label", f"{labels.SCOPE}={pod.scope}",
                     "--network", f"container:{pod.containers['pod']}", "--entrypoint", "python3", image,
                     "-c", FAKE_UPSTREAM, str(ROUTE_PORT))
    assert started.returncode == 0, started.stdout
    logs = subprocess.Popen(["docker", "logs", "-f", name], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        wait_for_line(logs.stdout, "listening", timeout=60)
    finally:
        logs.kill()
        logs.wait()
        if logs.stdout is not None:
            logs.stdout.close()
    return name


def test_the_pods_proxy_carries_the_secret_the_session_never_holds(user: User, scope: str, workspace: Path,
                                                                   world: World, images: Images,
                                                                   pods: list[LocalPod]) -> None:
    objects = render_with_routes(user, scope, workspace, world, images, "sh", "-c",
                                 "git ls-remote https://github.com/me/repo 2>&1; "
                                 "curl -sS -H \"Authorization: Bearer $GH_TOKEN\" https://api.github.com/user 2>&1; "
                                 "env; ls /run/dejima 2>&1")
    name = objects[2]["metadata"]["name"]
    pod = start_pod(objects, scope, world.network, {CLAIM: workspace}, {(f"{name}-credentials", "GH_TOKEN"): TOKEN})
    pods.append(pod)
    upstream = fake_upstream_in(pod, images.session)
    result = run_container(pod, objects)  # the upstream answered before the session ended
    seen, api_seen = [line for line in docker("logs", upstream).stdout.decode().splitlines()
                      if line.startswith("request ")]  # git's, then gh's API through the TLS fallback
    basic = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert seen.split()[1] == "/me/repo/info/refs?service=git-upload-pack" and seen.split()[-1] == basic
    # curl trusted the session CA the pod's proxy made (the session's bundle, read-only in its home)
    assert api_seen.split()[1:] == ["/user", "Bearer", TOKEN]
    out = result.stdout.decode(errors="replace")
    assert TOKEN not in out and basic not in out  # the session held only the placeholder
    assert "No such file or directory" in out  # the proxy's socket is not in the session's reach
    session = inspect(next(c for name, c in pod.containers.items() if "-session-" in name))
    assert TOKEN not in json.dumps(session)  # not even in what the engine knows of the session's container


def test_only_the_proxys_uid_gets_out_to_its_routes_port(user: User, scope: str, workspace: Path, world: World,
                                                         images: Images, pods: list[LocalPod]) -> None:
    objects = render_with_routes(user, scope, workspace, world, images, *world.probe(
        tcp(world.web, ROUTE_PORT), {"op": "resolve", "name": "other.dejima.test"}))
    name = objects[2]["metadata"]["name"]
    pod = start_pod(objects, scope, world.network, {CLAIM: workspace}, {(f"{name}-credentials", "GH_TOKEN"): TOKEN})
    pods.append(pod)

    def from_proxy_container(uid: int, *actions: dict[str, object]) -> list[dict[str, Any]]:
        ran = docker("exec", "--user", f"{uid}:{uid}", pod.containers["proxy"], *world.probe(*actions))
        assert ran.returncode == 0, ran.stdout
        found: list[dict[str, Any]] = json.loads(ran.stdout.decode().splitlines()[-1])
        return found

    proxy_tcp, proxy_name = from_proxy_container(PROXY_UID, tcp(world.web, ROUTE_PORT),
                                                 {"op": "resolve", "name": "other.dejima.test"})
    assert proxy_tcp["result"] == "connected"  # the control: the proxy's uid reaches the route's port
    assert proxy_name == {"result": "resolved", "addresses": [world.web]}  # through the cluster's DNS, second
    (other_uid,) = from_proxy_container(PROXY_UID + 1, tcp(world.web, ROUTE_PORT))
    assert other_uid["result"] == "blocked"  # the same container, another uid: refused
    result = run_container(pod, objects)
    session_tcp, session_name = json.loads(result.stdout.decode().splitlines()[-1])
    assert session_tcp["result"] == "blocked" and session_name["result"] == "failed"


def test_a_grant_through_kubectl_exec_reaches_the_running_pod(user: User, scope: str, workspace: Path,
                                                              world: World, images: Images,
                                                              pods: list[LocalPod]) -> None:
    """`kubectl exec POD -c filter -- python3 -m dejima.filter.grant` (here: docker exec into the filter's
    container, as the kubelet's exec does): the next session container gets through; other uids in the
    filter's container cannot reach the control socket, and the session's cannot see it."""
    objects = render(user, scope, workspace, world, images, "--",
                     *world.probe(tcp("web.dejima.test", 8080), {"op": "read", "path": "/run/dejima-control"}))
    pod = start_pod(objects, scope, world.network, {CLAIM: workspace})
    pods.append(pod)

    def session() -> list[dict[str, Any]]:
        result = run_container(pod, objects)
        found: list[dict[str, Any]] = json.loads(result.stdout.decode().splitlines()[-1])
        return found

    before, hidden = session()
    assert before["result"] == "blocked" and hidden["result"] == "error"  # the control: not granted yet
    grant = ["python3", "-m", "dejima.filter.grant", "web.dejima.test:8080"]
    stranger = docker("exec", "--user", "1000:1000", pod.containers["filter"], *grant)
    assert stranger.returncode != 0 and b"Permission denied" in stranger.stdout
    granted = docker("exec", pod.containers["filter"], *grant)
    assert granted.returncode == 0, granted.stdout
    assert json.loads(granted.stdout)["granted"] == ["web.dejima.test:8080"]
    after, _ = session()
    assert after["result"] == "connected"
    listed = docker("exec", pod.containers["filter"], *grant[:3], "--list")
    assert listed.returncode == 0 and b"web.dejima.test:8080" in listed.stdout
    refused = docker("exec", pod.containers["filter"], "python3", "-m", "dejima.filter.grant", "bad.wild.dejima.test")
    assert refused.returncode == 1 and b"deny" in refused.stdout.lower()  # the filter's own refusal, with its reason
    revoked = docker("exec", pod.containers["filter"], *grant[:3], "--revoke", "web.dejima.test:8080")
    assert revoked.returncode == 0, revoked.stdout
    again, _ = session()
    assert again["result"] == "blocked"  # taken back: the next session container is refused again


def test_a_published_port_of_the_pod_answers_and_its_other_ports_do_not(user: User, scope: str, workspace: Path,
                                                                        world: World, images: Images,
                                                                        pods: list[LocalPod]) -> None:
    """`--render pod --publish 3000`: what the Service would send to the pod's address reaches the session's
    port 3000; its port 3001, listening on every address, is dropped; egress stays as the policy says."""
    from tests.integration.test_published_ports import SERVERS, fetch

    objects = render(user, scope, workspace, world, images, "--publish", "3000", "--allow", "web.dejima.test:8080",
                     "--", "python3", "-c", SERVERS, world.other, "web.dejima.test")
    assert [d["kind"] for d in objects] == ["ConfigMap", "NetworkPolicy", "Pod", "Service"]
    pod = start_pod(objects, scope, world.network, {CLAIM: workspace})
    pods.append(pod)
    session = start_container(pod, objects, "listening")
    address = inspect(pod.containers["pod"])["NetworkSettings"]["Networks"][world.network]["IPAddress"]
    assert fetch(address, 3001) == "timeout"
    assert fetch(address, 3000) == fetch(address, 3000) == "hello from 3000\n"
    assert docker("wait", session, timeout=60).stdout.decode().strip() == "0"
    result = json.loads(docker("logs", session).stdout.decode().splitlines()[-1])
    assert result["decoy"] == "blocked" and result["allowed"] == "connected", result
    assert result["peer"] == "blocked", result
