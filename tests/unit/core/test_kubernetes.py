"""The session as Kubernetes objects (dejima/core/kubernetes.py): goldens for three manifest combinations,
every render checked against the vendored schemas (tests/data/kubernetes: Kubernetes v1.37 strict, agent-sandbox
v0.5.6's Sandbox), and hostile names, paths and entries that must stay values in the YAML."""

from __future__ import annotations

import copy
import ipaddress
import json
from dataclasses import replace
from functools import cache
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml

from dejima.adapters.manifest_files import load_catalog
from dejima.core.kubernetes import (
    CONTROL_SOCKET_PATH,
    PROBE,
    PROXY_UID,
    READY_FILE,
    SANDBOX_API_VERSION,
    KubernetesTarget,
    PodProxy,
    kubernetes_objects,
    kubernetes_yaml,
    object_name,
    quantity,
)
from dejima.core.paths import FILTER_CONFIG_ENV
from dejima.core.plan import Identity, NetworkFacts, SessionPlan, SessionRequest, build_session_plan
from dejima.core.resolve import WorkspaceFacts, resolve
from dejima.core.settings import LimitSettings, NetworkSettings, Settings
from dejima.errors import UsageError
from dejima.filter.grant import SOCKET as GRANT_SOCKET

GOLDEN = Path(__file__).parents[2] / "golden" / "kubernetes"
SCHEMAS = Path(__file__).parents[2] / "data" / "kubernetes"
IDENTITY = Identity(uid=1000, gid=1000, name="dev")
FACTS = NetworkFacts(upstreams=(ipaddress.IPv4Address("10.96.0.10"),))
TARGET = KubernetesTarget("Sandbox", "registry.example.com/dejima/filter:1", "registry.example.com/dejima/session:1")


def make_plan(workspace: str = "/home/dev/src/web-app", command: tuple[str, ...] | None = ("make", "test"),
              harness: str = "shell", workflows: tuple[str, ...] = (), remote_hosts: frozenset[str] = frozenset(),
              settings: Settings | None = None, **request: Any) -> SessionPlan:
    resolved = resolve(load_catalog(include_user=False).manifests, WorkspaceFacts(remote_hosts=remote_hosts), harness,
                       workflows=workflows)
    base = SessionRequest(
        session_id=object_name(workspace), scope="k8s", workspace=PurePosixPath(workspace),
        home_dir=PurePosixPath("/unused/home"), command=command, launcher="render",
        resolv_conf=PurePosixPath("/unused/resolv.conf"), gate_dir=PurePosixPath("/unused/gate"),
        run_dir=PurePosixPath("/unused/run"))
    credential_env = request.pop("credential_env", ())  # the variables a proxy's routes would give the session
    return build_session_plan(replace(base, **request), settings or Settings(), IDENTITY, "<filter image>",
                              "<session image>", FACTS, "settings.toml", resolved, engine_memory=None,
                              harness_env=credential_env)


PLACEHOLDER = "sk-ant-api03-placeholder0123456789abcdef"
PROXY = PodProxy(json.dumps({"routes": [{"name": "anthropic-api-key", "upstream": "https://api.anthropic.com",
                                         "header": "x-api-key", "scheme": "raw", "placeholder": PLACEHOLDER,
                                         "username": None, "secret": "ANTHROPIC_API_KEY", "push": None}],
                             "decoys": {"NPM_TOKEN": "npm_decoy0123456789"}, "memory_budget": 67108864,
                             "max_connections": 128}, sort_keys=True),
                 ("ANTHROPIC_API_KEY",), (443,), ("anthropic-api-key",), (PLACEHOLDER, "npm_decoy0123456789"))


def combinations() -> dict[str, tuple[SessionPlan, KubernetesTarget, PodProxy | None]]:
    """Three sessions people run: a shell's command; Claude Code on a Node project on GitHub, its model's
    route served by the pod's proxy, on a gVisor runtime; an interactive Python session as a plain Pod."""
    limits = Settings(limits=LimitSettings(session_memory="4g"))
    return {
        "shell-sandbox": (make_plan(), TARGET, None),
        "node-claude-code-sandbox": (
            make_plan("/srv/agents/shop", command=None, harness="claude-code", workflows=("node",),
                      remote_hosts=frozenset({"github.com"}), settings=limits, allow=("pypi.org",),
                      credential_env=(("ANTHROPIC_BASE_URL", "http://127.0.0.1:700/r/anthropic-api-key"),
                                                   ("ANTHROPIC_API_KEY", PLACEHOLDER))),
            replace(TARGET, namespace="agents", runtime_class="gvisor"), PROXY),
        "python-pod": (
            make_plan("/home/dev/src/data-tool", command=None, workflows=("python",), settings=limits,
                      read_only=(PurePosixPath("/home/dev/src/data-tool/.git/hooks"),)),
            replace(TARGET, kind="Pod", workspace_claim="team-data-tool"), None),
    }


@pytest.mark.parametrize("name", sorted(combinations()))
def test_renders_match_their_goldens(name: str, update_golden: bool) -> None:
    plan, target, proxy = combinations()[name]
    # The plan's hash covers the manifests' file paths, which differ between checkouts.
    text = kubernetes_yaml(kubernetes_objects(plan, target, proxy)).replace(plan.plan_hash, "<plan hash>")
    golden = GOLDEN / f"{name}.yaml"
    if update_golden:
        golden.write_text(text)
    assert text == golden.read_text()


@cache
def core_schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((SCHEMAS / "kubernetes-v1.37.0-strict.json").read_text())
    return loaded


def core_validator(definition: str) -> jsonschema.Draft202012Validator:
    schema = {**core_schema(), "$ref": f"#/$defs/{definition}"}
    return jsonschema.Draft202012Validator(schema)


def strict_crd(node: Any) -> Any:
    """The CRD's schema, where a field it does not declare is an error: the API server would prune it
    silently (a typo in the render would just vanish), so a render must not have any."""
    if isinstance(node, dict):
        node = {k: strict_crd(v) for k, v in node.items()}
        if "properties" in node and "additionalProperties" not in node \
                and not node.get("x-kubernetes-preserve-unknown-fields"):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [strict_crd(v) for v in node]
    return node


@cache
def sandbox_schema() -> dict[str, Any]:
    crd: dict[str, Any] = strict_crd(json.loads((SCHEMAS / "agent-sandbox-v0.5.6-sandbox-v1beta1.json").read_text()))
    crd["properties"]["metadata"] = {"$ref": "#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    return {**crd, "$defs": core_schema()["$defs"]}


SCHEMA_OF = {"ConfigMap": "io.k8s.api.core.v1.ConfigMap", "NetworkPolicy": "io.k8s.api.networking.v1.NetworkPolicy",
             "Pod": "io.k8s.api.core.v1.Pod", "Service": "io.k8s.api.core.v1.Service"}


def schema_errors(document: dict[str, Any]) -> list[str]:
    """Every error of one object against its published schema; a Sandbox's pod template also against the
    strict PodSpec (the CRD's copy of it allows what the API server would then refuse or prune)."""
    if document["kind"] == "Sandbox":
        assert document["apiVersion"] == SANDBOX_API_VERSION
        errors = list(jsonschema.Draft202012Validator(sandbox_schema()).iter_errors(document))
        errors += core_validator("io.k8s.api.core.v1.PodSpec").iter_errors(document["spec"]["podTemplate"]["spec"])
    else:
        errors = list(core_validator(SCHEMA_OF[document["kind"]]).iter_errors(document))
    return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in errors]


def rendered(plan: SessionPlan, target: KubernetesTarget, proxy: PodProxy | None = None) -> list[dict[str, Any]]:
    """The YAML as kubectl reads it: every render is checked through its text, not its dicts."""
    return list(yaml.safe_load_all(kubernetes_yaml(kubernetes_objects(plan, target, proxy))))


@pytest.mark.parametrize("name", sorted(combinations()))
def test_every_render_validates_against_the_published_schemas(name: str) -> None:
    documents = rendered(*combinations()[name])
    assert [d["kind"] for d in documents] == ["ConfigMap", "NetworkPolicy", combinations()[name][1].kind]
    for document in documents:
        assert schema_errors(document) == [], document["kind"]


def test_the_schema_check_can_fail() -> None:
    """Controls: a misspelt field, a wrong type and an unknown Sandbox field are each refused."""
    plan, target, _ = combinations()["shell-sandbox"]
    sandbox = rendered(plan, target)[2]
    pod_spec = sandbox["spec"]["podTemplate"]["spec"]
    broken = copy.deepcopy(sandbox)
    broken["spec"]["podTemplate"]["spec"]["containers"][0]["securityContxt"] = {}
    assert any("securityContxt" in e for e in schema_errors(broken))
    broken = copy.deepcopy(sandbox)
    broken["spec"]["replica"] = 1
    assert any("replica" in e for e in schema_errors(broken))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}, "spec": copy.deepcopy(pod_spec)}
    pod["spec"]["containers"][0]["securityContext"]["runAsUser"] = "1000"
    assert any("runAsUser" in e for e in schema_errors(pod))


def pod_spec_of(documents: list[dict[str, Any]]) -> dict[str, Any]:
    pod = documents[2]
    spec: dict[str, Any] = pod["spec"]["podTemplate"]["spec"] if pod["kind"] == "Sandbox" else pod["spec"]
    return spec


def test_the_filter_is_a_native_sidecar_the_session_waits_for() -> None:
    plan, target, _ = combinations()["shell-sandbox"]
    documents = rendered(plan, target)
    spec = pod_spec_of(documents)
    (filter_container,), (session,) = spec["initContainers"], spec["containers"]
    assert filter_container["restartPolicy"] == "Always"  # a sidecar: the kubelet starts the session after it
    assert filter_container["startupProbe"]["exec"]["command"] == list(PROBE)
    assert filter_container["securityContext"]["capabilities"] == {"drop": ["ALL"],
                                                                   "add": ["NET_ADMIN", "NET_BIND_SERVICE"]}
    config_ref = filter_container["env"][0]
    assert config_ref["name"] == FILTER_CONFIG_ENV
    config = json.loads(documents[0]["data"][config_ref["valueFrom"]["configMapKeyRef"]["key"]])
    assert documents[0]["metadata"]["name"] == config_ref["valueFrom"]["configMapKeyRef"]["name"]
    assert config["ruleset"] == plan.ruleset and config["ready_file"] == READY_FILE
    assert "bridge" not in config  # no routes: no proxy to relay to
    # live grants: kubectl exec into the filter's container (filter/grant.py), root only, its volume the filter's
    assert config["control"] == {"socket": CONTROL_SOCKET_PATH, "owner": 0} and CONTROL_SOCKET_PATH == GRANT_SOCKET
    mounted = {m["name"] for c in (*spec["initContainers"], *spec["containers"]) for m in c["volumeMounts"]
               if m["name"] == "filter-control"}
    assert mounted == {"filter-control"} and all(m["name"] != "filter-control" for m in session["volumeMounts"])
    assert session["securityContext"] == {
        "runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True, "allowPrivilegeEscalation": False,
        "privileged": False, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"}}
    assert spec["automountServiceAccountToken"] is False and spec["enableServiceLinks"] is False
    assert spec["dnsPolicy"] == "None" and spec["dnsConfig"]["nameservers"] == ["127.0.0.1"]
    assert "shareProcessNamespace" not in spec and "hostNetwork" not in spec
    sysctls = {s["name"]: s["value"] for s in spec["securityContext"]["sysctls"]}
    assert sysctls["net.ipv6.conf.all.disable_ipv6"] == "1"  # the filter refuses to start without it
    assert sysctls["net.ipv4.ip_unprivileged_port_start"] == "1024"


def test_the_pod_has_the_local_limits_and_mounts() -> None:
    plan, target, _ = combinations()["python-pod"]
    spec = pod_spec_of(rendered(plan, target))
    session = spec["containers"][0]
    assert plan.session.limits is not None
    assert session["resources"]["limits"]["memory"] == "4Gi" == quantity(plan.session.limits.memory or 0)
    assert spec["initContainers"][0]["resources"]["limits"]["memory"] == "256Mi"
    mounts = {m["mountPath"]: m for m in session["volumeMounts"]}
    assert mounts["/home/dev/src/data-tool"]["name"] == "workspace"
    assert mounts["/home/dev/src/data-tool/.git/hooks"] == {"name": "workspace", "mountPath":
                                                            "/home/dev/src/data-tool/.git/hooks", "readOnly": True,
                                                            "subPath": ".git/hooks"}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["workspace"]["persistentVolumeClaim"]["claimName"] == "team-data-tool"
    assert volumes["tmp"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    assert session["tty"] is True and session["stdin"] is True  # interactive: kubectl attach -it


def test_without_a_proxy_the_routes_variables_stay_out() -> None:
    from dejima.adapters.session_dirs import new_draws
    from dejima.core.route_plan import declared_routes, plan_routes

    plan, target, _ = combinations()["node-claude-code-sandbox"]
    plan = replace(plan, routes=plan_routes(declared_routes(plan.resolved), new_draws()))  # planned, not served
    text = kubernetes_yaml(kubernetes_objects(plan, target))
    assert PLACEHOLDER not in text
    assert "ANTHROPIC_BASE_URL" not in text  # the route's variables go with the route, which the pod lacks
    annotations = list(yaml.safe_load_all(text))[2]["metadata"]["annotations"]
    assert annotations["dejima.credential-routes"].startswith("left out: anthropic-api-key, github-api")


def test_the_proxy_is_a_sidecar_of_its_own_holding_the_secret_by_reference() -> None:
    plan, target, proxy = combinations()["node-claude-code-sandbox"]
    text = kubernetes_yaml(kubernetes_objects(plan, target, proxy))
    documents = list(yaml.safe_load_all(text))
    assert all(d["kind"] != "Secret" for d in documents)  # made by the user; referenced, never rendered
    spec = pod_spec_of(documents)
    filter_container, proxy_container = spec["initContainers"]  # the filter first: the proxy's egress needs it
    name = documents[2]["metadata"]["name"]
    assert proxy_container["restartPolicy"] == "Always" and proxy_container["command"] == [
        "python3", "-m", "dejima.proxy.pod"]
    secret = [e for e in proxy_container["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    assert secret == [{"name": "ANTHROPIC_API_KEY", "valueFrom": {"secretKeyRef": {
        "name": f"{name}-credentials", "key": "ANTHROPIC_API_KEY"}}}]
    assert proxy_container["securityContext"]["runAsUser"] == PROXY_UID
    assert proxy_container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    session = spec["containers"][0]
    mounted = {m["name"] for m in session["volumeMounts"]}
    assert "filter-run" not in mounted and "proxy-records" not in mounted  # the socket is out of its reach
    assert {e["name"]: e.get("value") for e in session["env"]}["ANTHROPIC_API_KEY"] == PLACEHOLDER
    assert all("valueFrom" not in e for e in session["env"])  # nothing of the Secret or the ConfigMap
    config = json.loads(documents[0]["data"]["filter.json"])
    assert config["bridge"] == {"socket": "/run/dejima/proxy.sock", "port": 700}
    assert f"meta skuid {PROXY_UID} tcp dport 443 accept" in config["ruleset"]
    assert set(config["canaries"]) >= {"placeholder0123456789abcdef"[-16:]}
    assert documents[0]["data"]["proxy.json"] == proxy.document if proxy else False
    assert spec["dnsConfig"]["nameservers"] == ["127.0.0.1", "10.96.0.10"]  # the proxy's way to its upstreams
    assert "served by the pod's proxy: anthropic-api-key" in documents[2]["metadata"]["annotations"][
        "dejima.credential-routes"]


def test_the_tls_fallbacks_hosts_resolve_to_the_relay_and_the_session_reads_the_ca_read_only() -> None:
    plan, target, proxy = combinations()["node-claude-code-sandbox"]
    assert proxy is not None
    documents = rendered(plan, target, replace(proxy, intercept=("api.github.com",)))
    config = json.loads(documents[0]["data"]["filter.json"])
    assert config["intercept"] == {"socket": "/run/dejima/tls.sock", "port": 443, "names": ["api.github.com"]}
    spec = pod_spec_of(documents)
    trust = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}["/home/dejima/.dejima/tls"]
    assert trust == {"name": "proxy-trust", "mountPath": "/home/dejima/.dejima/tls", "readOnly": True}
    assert {"name": "proxy-trust", "mountPath": "/run/dejima-trust"} in spec["initContainers"][1]["volumeMounts"]
    for document in documents:
        assert schema_errors(document) == []
    assert "intercept" not in json.loads(rendered(plan, target, proxy)[0]["data"]["filter.json"])


def test_a_session_as_the_proxys_uid_is_refused() -> None:
    plan, target, proxy = combinations()["node-claude-code-sandbox"]
    as_proxy = replace(plan, session=replace(plan.session, user=f"{PROXY_UID}:{PROXY_UID}"))
    with pytest.raises(UsageError, match="proxy"):
        kubernetes_objects(as_proxy, target, proxy)


def test_the_network_policy_allows_dns_and_the_allowed_places_only() -> None:
    plan, target, proxy = combinations()["node-claude-code-sandbox"]
    policy = rendered(plan, target)[1]["spec"]
    assert policy["ingress"] == [] and policy["policyTypes"] == ["Ingress", "Egress"]
    dns, names = policy["egress"]
    assert dns["to"] == [{"ipBlock": {"cidr": "10.96.0.10/32"}}]
    assert {p["port"] for p in dns["ports"]} == {53}
    excepted = names["to"][0]["ipBlock"]["except"]
    assert "169.254.0.0/16" in excepted and "10.0.0.0/8" in excepted  # metadata and the cluster's own ranges
    assert "ports" not in names  # pypi.org was allowed on every port
    literal = make_plan(allow=("203.0.113.0/24:22",))
    rules = rendered(literal, TARGET)[1]["spec"]["egress"]
    assert {"to": [{"ipBlock": {"cidr": "203.0.113.0/24"}}], "ports": [{"protocol": "TCP", "port": 22}]} in rules
    answers = make_plan(allow=("pypi.org:443",), settings=Settings(network=NetworkSettings(
        answer_networks=("10.20.0.0/16",))))
    names_rule = rendered(answers, TARGET)[1]["spec"]["egress"][-1]
    assert "10.0.0.0/8" not in names_rule["to"][0]["ipBlock"]["except"]  # the user let answers point there
    assert names_rule["ports"] == [{"protocol": "TCP", "port": 443}]
    with_proxy = rendered(plan, target, proxy)[1]["spec"]["egress"]
    assert with_proxy[-1]["ports"] == [{"protocol": "TCP", "port": 443}]  # the proxy's routes, public addresses


HOSTILE_PATHS = [
    "/home/dev/x\n---\n- kind\n  - Secret",  # (':' is refused: Kubernetes takes no mount path with one)
    "/home/dev/{a, 1}, [b]",
    "/home/dev/&anchor *alias !!python/object/apply os.system",
    "/home/dev/\u202eevil\u001b[31m",
    "/home/dev/'quoted\" # comment",
    "/home/dev/-",
]


@pytest.mark.parametrize("workspace", HOSTILE_PATHS)
def test_hostile_workspace_paths_stay_values(workspace: str) -> None:
    plan = make_plan(workspace, command=("echo", "x\n---\nkind: Secret", "${HOME}", "&a"),
                     settings=Settings(network=NetworkSettings(deny=("evil.example",),
                                                               deny_reasons={"evil.example": "a\n---\nb: c"})))
    text = kubernetes_yaml(kubernetes_objects(plan, TARGET))
    assert "\x1b" not in text and "\u202e" not in text  # escaped: nothing a terminal acts on
    documents = list(yaml.safe_load_all(text))
    assert [d["kind"] for d in documents] == ["ConfigMap", "NetworkPolicy", "Sandbox"]
    spec = pod_spec_of(documents)
    assert spec["containers"][0]["workingDir"] == workspace
    assert spec["containers"][0]["args"] == ["echo", "x\n---\nkind: Secret", "${HOME}", "&a"]
    assert documents[2]["metadata"]["annotations"]["dejima.workspace"] == workspace
    name = documents[2]["metadata"]["name"]
    assert name == object_name(workspace) and len(name) <= 63
    for document in documents:
        assert schema_errors(document) == []


def test_names_are_kubernetes_names_whatever_the_directory_is_called() -> None:
    for workspace in ("/srv/My Project!!", "/srv/" + "x" * 200, "/srv/---", "/srv/日本語"):
        name = object_name(workspace)
        assert len(name) <= 63 - len("-filter")
        assert name.startswith("dejima-") and name.replace("-", "").isalnum() and name == name.lower()
    assert object_name("/a/app") != object_name("/b/app")  # one per workspace


def test_refused_plans_say_why() -> None:
    with pytest.raises(UsageError, match="non-root"):
        kubernetes_objects(replace(make_plan(), session=replace(make_plan().session, user="0:0")), TARGET)
    with pytest.raises(UsageError, match="':'"):
        kubernetes_objects(make_plan("/srv/a:b"), TARGET)


@pytest.mark.parametrize("kind", ["Sandbox", "Pod"])
def test_published_ports_are_a_service_selecting_the_pod_and_nothing_more(kind: str) -> None:
    """`--render kubernetes --publish`: a ClusterIP Service (its port the host port, its target the session's),
    the session container's port, an ingress rule to those ports only, the ruleset's inbound rule; each object
    valid against the published schemas. Without a publish there is no Service and no ingress (the goldens)."""
    plan = make_plan(publish=("3000", "8080:3001"))
    documents = rendered(plan, replace(TARGET, kind=kind), PROXY)  # type: ignore[arg-type]
    assert [d["kind"] for d in documents] == ["ConfigMap", "NetworkPolicy", kind, "Service"]
    for document in documents:
        assert schema_errors(document) == [], document["kind"]
    service, pod = documents[3], documents[2]
    broken = copy.deepcopy(service)  # control: the Service's schema refuses what it does not declare
    broken["spec"]["ports"][0]["targetPrt"] = 3000
    assert any("targetPrt" in e for e in schema_errors(broken))
    pod_labels = pod["spec"]["podTemplate"]["metadata"]["labels"] if kind == "Sandbox" else pod["metadata"]["labels"]
    assert service["spec"]["selector"] == pod_labels and service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [
        {"name": "published-3000", "protocol": "TCP", "port": 3000, "targetPort": 3000},
        {"name": "published-8080", "protocol": "TCP", "port": 8080, "targetPort": 3001}]
    session = pod_spec_of(documents)["containers"][0]
    assert session["ports"] == [{"containerPort": 3000, "protocol": "TCP"}, {"containerPort": 3001, "protocol": "TCP"}]
    assert documents[1]["spec"]["ingress"] == [{"from": [{"podSelector": {}}], "ports": [
        {"protocol": "TCP", "port": 3000}, {"protocol": "TCP", "port": 3001}]}]
    ruleset = json.loads(documents[0]["data"]["filter.json"])["ruleset"]
    assert "\t\ttcp dport { 3000, 3001 } ct state new accept\n" in ruleset and "meta skuid" in ruleset
    without = rendered(make_plan(), TARGET)
    assert [d["kind"] for d in without] == ["ConfigMap", "NetworkPolicy", "Sandbox"]
    assert without[1]["spec"]["ingress"] == [] and "ports" not in pod_spec_of(without)["containers"][0]


def test_a_plan_with_an_upstream_proxy_is_refused_not_rendered_without_it() -> None:
    """The pod's ruleset would have no relay: a render must not drop the proxy the user asked for in silence."""
    from dejima.core.upstream_proxy import UpstreamProxy

    proxy = UpstreamProxy("proxy.corp", 3128, "settings.toml network.upstream_proxy", ipaddress.IPv4Address("10.0.0.5"))
    plan = replace(make_plan(), upstream_proxy=proxy)
    with pytest.raises(UsageError, match="upstream proxy http://proxy.corp:3128 .from settings.toml"):
        kubernetes_objects(plan, TARGET)
    kubernetes_objects(make_plan(), TARGET)  # the control: the same plan without one renders
