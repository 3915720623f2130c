"""A session plan as Kubernetes objects: the pair as one pod, its policy as a ConfigMap, a NetworkPolicy
as a second layer, and a Service for published ports when the session has any.

    objects = kubernetes_objects(plan, target, proxy)   # ConfigMap, NetworkPolicy, the Sandbox (or Pod), [Service]
    text = kubernetes_yaml(objects)                     # what `dejima PATH --render kubernetes` prints

The pod is the local pair's shape: the filter is a native sidecar (an init container that keeps
running, `restartPolicy: Always`) holding NET_ADMIN in the pod's network namespace; the kubelet
starts the next container only once the filter's startup probe passes, and the probe passes only
once the ruleset is verified (dejima/filter/probe.py): that order is the local start gate. With
credential routes, the proxy is a second sidecar (proxy/pod.py): its own uid, the only one the
ruleset lets out to the routes' ports; the secrets from a Secret the render names and never writes.
The session runs with every capability dropped, as a non-root uid, without a service-account
token or the cluster's service variables, its resolver the filter's on 127.0.0.1. Published ports
(`--publish`) become a ClusterIP Service selecting the pod (its host port the Service's port), the
session container's ports, an ingress rule from the namespace's pods to those ports only, and the
ruleset's inbound rule; a cluster has no "host loopback", so the Service is the narrowest equivalent.

Everything here is data from the plan; names and paths that came from the workspace are values in
the YAML (quoted by the emitter), never structure.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

from dejima.core import labels
from dejima.core.limits import ContainerLimits
from dejima.core.paths import (
    BRIDGE_PORT,
    FILTER_CONFIG_ENV,
    FILTER_RUN_DIR,
    GATE_DIR,
    PROXY_CONFIG_ENV,
    PROXY_RECORDS_DIR,
    PROXY_TRUST_DIR,
    SESSION_HOME,
    SESSION_TRUST_DIR,
)
from dejima.core.plan import (
    PROXY_SOCKET,
    TLS_PORT,
    TLS_SOCKET,
    ContainerSpec,
    SessionPlan,
    canary_signature,
    filter_config,
)
from dejima.core.ruleset import ProxyEgress, render_ruleset
from dejima.errors import UsageError

# agent-sandbox (kubernetes-sigs/agent-sandbox) v0.5.6: the Sandbox's served and stored version.
SANDBOX_API_VERSION = "agents.x-k8s.io/v1beta1"
READY_FILE = f"{FILTER_RUN_DIR}/ready"
CONFIG_KEY, PROXY_CONFIG_KEY = "filter.json", "proxy.json"
PROBE = ("python3", "-m", "dejima.filter.probe", READY_FILE)
# The pod's credential proxy (proxy/pod.py): its own uid, which the ruleset lets reach the routes'
# ports and nothing else of the pod has; ready once its socket accepts a connection.
CONTROL_DIR = "/run/dejima-control"
CONTROL_SOCKET_PATH = f"{CONTROL_DIR}/control.sock"  # filter/grant.py's SOCKET
PROXY_UID = 10700
PROXY_SOCKET_PATH = f"{FILTER_RUN_DIR}/{PROXY_SOCKET}"
PROXY_COMMAND = ("python3", "-m", "dejima.proxy.pod")
PROXY_PROBE = ("python3", "-c", "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])",
               PROXY_SOCKET_PATH)
PROXY_MEMORY = 256 << 20
# Where names may lead, for the NetworkPolicy: anywhere public. The filter's resolver already refuses
# answers into these; the NetworkPolicy repeats it below the pod, where the filter cannot be bypassed.
NOT_PUBLIC = tuple(ipaddress.IPv4Network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16",
    "224.0.0.0/3"))
MEMORY_REQUEST = 64 << 20  # what the scheduler reserves of each container's memory (the limit is its ceiling)
CPU_PER_SHARE_MILLI = 100  # the engine's default weight (1024) as a request of 100m
APP_LABEL = "app.kubernetes.io/name"
PLAN_HASH_ANNOTATION = "dejima.plan-hash"
ROUTES_ANNOTATION = "dejima.credential-routes"

ObjectKind = Literal["Sandbox", "Pod"]
Object = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PodProxy:
    """The routes a pod's proxy container serves, as the render planned them (proxy/pod.py)."""

    document: str  # its configuration: routes, placeholders, decoys, push rules (JSON; no secret)
    variables: tuple[str, ...]  # the variables holding the secrets: the keys of the Kubernetes Secret
    ports: tuple[int, ...]  # the routes' upstream ports: the only ones the ruleset lets the proxy reach
    routes: tuple[str, ...]
    canaries: tuple[str, ...]  # placeholders and decoys: the filter's resolver refuses names that hold them
    intercept: tuple[str, ...] = ()  # the TLS fallback's hosts: they resolve to the filter's relay to the proxy
    optional: tuple[str, ...] = ()  # Secret keys it may go without (AWS_SESSION_TOKEN: for temporary keys)


@dataclass(frozen=True, slots=True)
class KubernetesTarget:
    """Where the pod goes: what a cluster needs that a local start finds itself."""

    kind: ObjectKind
    filter_image: str
    session_image: str
    namespace: str = ""  # empty: kubectl's current namespace
    workspace_claim: str = ""  # empty: dejima-workspace-<project>
    runtime_class: str = ""  # empty: the cluster's default
    ready_timeout: float = 30.0  # seconds the filter may take to verify its ruleset
    stop_timeout: float = 10.0  # the pod's grace period


# What a render needs that only the cluster can say: each [kubernetes] key, and how to fill it.
NEEDED_SETTINGS = (
    ("filter_image", "the filter image as the cluster pulls it: tag and push the filter image `dejima images "
                     "list` marks as the current settings', then set filter_image = \"REGISTRY/dejima/filter:TAG\""),
    ("session_image", "the session image as the cluster pulls it: tag and push the session image `dejima images "
                      "list` marks for this project, then set session_image = \"REGISTRY/dejima/session:TAG\""),
    ("dns_upstreams", "the cluster's DNS service, the filter's upstream (this host's resolvers are not the "
                      "cluster's): `kubectl -n kube-system get service kube-dns` shows it; set dns_upstreams = "
                      "[\"IP\"], or pass --dns-upstream IP"),
)


def check_settings(values: dict[str, object], settings_file: str) -> None:
    """Every [kubernetes] setting a render needs and ``values`` lacks, in one ``UsageError``: each key
    on a line of its own with its fix (one at a time, a user would edit and run again for each)."""
    missing = [(key, fix) for key, fix in NEEDED_SETTINGS if not values.get(key)]
    if not missing:
        return
    count = f"{len(missing)} [kubernetes] setting{' is' if len(missing) == 1 else 's are'} missing"
    raise UsageError(f"a Kubernetes render needs what only the cluster can say: {count} in {settings_file}",
                     context="\n".join(f"[kubernetes] {key}: {fix}" for key, fix in missing),
                     hint="set them under [kubernetes] (docs/kubernetes.md)", reference="kubernetes-settings")


def object_name(workspace: str) -> str:
    """dejima-<project>-<hash>: an RFC 1123 name whatever the directory is called, one per workspace."""
    slug = re.sub(r"[^a-z0-9]+", "-", PurePosixPath(workspace).name.lower()).strip("-")[:30].strip("-")
    digest = hashlib.sha256(workspace.encode()).hexdigest()[:8]
    return f"dejima-{slug or 'workspace'}-{digest}"


def secret_name(name: str) -> str:
    """The Kubernetes Secret the pod's proxy reads its routes' secrets from (the user makes it)."""
    return f"{name}-credentials"


def kubernetes_objects(plan: SessionPlan, target: KubernetesTarget, proxy: PodProxy | None = None,
                       left_out: tuple[str, ...] = ()) -> list[Object]:
    """The ConfigMap (the filter's and the proxy's configuration), the NetworkPolicy, then the Sandbox or
    the Pod, then a Service for the published ports (only when there are some). ``proxy``: the routes the
    pod's proxy serves; ``left_out``: routes a pod cannot serve."""
    _check_paths(plan)
    name = object_name(plan.workspace)
    session_user = _ids(plan.session.user)
    if session_user[0] == 0:
        raise UsageError("a Kubernetes render runs the session as a non-root uid (runAsNonRoot), but this plan runs "
                         "it as uid 0", hint="leave --as-root out, and render as the user the agent should run as")
    if plan.upstream_proxy is not None:
        raise UsageError(f"a Kubernetes render cannot send the pod's connections through the upstream proxy "
                         f"{plan.upstream_proxy.url} (from {plan.upstream_proxy.origin}) yet",
                         hint="unset it for the render (an empty [network] upstream_proxy and no HTTPS_PROXY); "
                              "the cluster's own egress proxying applies to the pod")
    if proxy is not None and PROXY_UID in session_user:
        raise UsageError(f"the session would run as uid/gid {PROXY_UID}, the pod's credential proxy's: the ruleset "
                         "lets that uid reach the routes' upstreams", hint="render as another user")
    pod_labels = {APP_LABEL: "dejima", labels.SESSION: name}
    annotations = {labels.WORKSPACE: plan.workspace, PLAN_HASH_ANNOTATION: plan.plan_hash}
    served = proxy.routes if proxy is not None else ()
    carried = [f"served by the pod's proxy: {', '.join(served)}"] if served else []
    missing = [*left_out, *(name for name in (plan.routes.names if plan.routes else ()) if name not in served)]
    if missing:
        carried.append(f"left out: {', '.join(dict.fromkeys(missing))}")
    if carried:
        annotations[ROUTES_ANNOTATION] = "; ".join(carried)
    config_map = _object("v1", "ConfigMap", f"{name}-config", target.namespace, pod_labels)
    config_map["data"] = {CONFIG_KEY: _filter_config(plan, proxy),
                          **({PROXY_CONFIG_KEY: proxy.document} if proxy is not None else {})}
    policy = _object("networking.k8s.io/v1", "NetworkPolicy", f"{name}-egress", target.namespace, pod_labels)
    policy["spec"] = _network_policy(plan, pod_labels, proxy)
    pod_spec = _pod_spec(plan, target, name, session_user, proxy)
    if target.kind == "Pod":
        pod = _object("v1", "Pod", name, target.namespace, pod_labels, annotations)
        pod["spec"] = pod_spec
    else:
        pod = _object(SANDBOX_API_VERSION, "Sandbox", name, target.namespace, pod_labels, annotations)
        pod["spec"] = {"podTemplate": {"metadata": {"labels": dict(pod_labels), "annotations": dict(annotations)},
                                       "spec": pod_spec}}
    return [config_map, policy, pod, *_services(plan, target, name, pod_labels)]


def _services(plan: SessionPlan, target: KubernetesTarget, name: str, pod_labels: dict[str, str]) -> list[Object]:
    """A ClusterIP Service for the published ports: its port the host port, its target the session's."""
    if not plan.filter.ports:
        return []
    service = _object("v1", "Service", f"{name}-published", target.namespace, pod_labels)
    service["spec"] = {"type": "ClusterIP", "selector": dict(pod_labels), "ports": [
        {"name": f"published-{p.host_port}", "protocol": "TCP", "port": p.host_port, "targetPort": p.session_port}
        for p in plan.filter.ports]}
    return [service]


def kubernetes_yaml(objects: list[Object]) -> str:
    """The objects as one YAML stream. Every string is a scalar the emitter quotes as it must: a
    workspace named `x\\n---\\nkind: Secret` stays one value. Non-ASCII and control characters are
    escaped, so the text shows nothing a terminal would act on."""
    import yaml

    class Dumper(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:  # no &anchors: each value written where it is used
            return True

    text: str = yaml.dump_all(objects, Dumper=Dumper, sort_keys=False, default_flow_style=False,
                              allow_unicode=False, width=1 << 20, explicit_start=True)
    return text


def _object(api_version: str, kind: str, name: str, namespace: str, object_labels: dict[str, str],
            annotations: dict[str, str] | None = None) -> Object:
    metadata: Object = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = dict(object_labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata}


def _filter_config(plan: SessionPlan, proxy: PodProxy | None) -> str:
    """The plan's policy for the filter, without the launcher's control channel (nothing on a host to
    reach), with the file its readiness probe reads; with a proxy, the ruleset lets the proxy's uid out
    to its routes' ports, the filter relays the session's 127.0.0.1:BRIDGE_PORT to the proxy's socket,
    and the resolver refuses names holding a placeholder or a decoy."""
    ruleset = plan.ruleset
    if proxy is not None:
        upstreams = tuple(ipaddress.IPv4Address(u) for u in plan.upstreams)
        ruleset = render_ruleset(plan.session_id, plan.policy, upstreams, ProxyEgress(PROXY_UID, proxy.ports),
                                 tuple(p.session_port for p in plan.filter.ports))
    config = json.loads(filter_config(plan.session_id, ruleset, plan.expectation, plan.policy, plan.upstreams))
    config["ready_file"] = READY_FILE
    # Live grants: `kubectl exec POD -c filter -- python3 -m dejima.filter.grant` (filter/grant.py), as root
    # in the filter's container; the socket's volume is mounted in no other container.
    config["control"] = {"socket": CONTROL_SOCKET_PATH, "owner": 0}
    if proxy is not None:
        config["bridge"] = {"socket": PROXY_SOCKET_PATH, "port": BRIDGE_PORT}
        config["canaries"] = sorted({canary_signature(c) for c in proxy.canaries})
        if proxy.intercept:
            config["intercept"] = {"socket": f"{FILTER_RUN_DIR}/{TLS_SOCKET}", "port": TLS_PORT,
                                   "names": sorted(proxy.intercept)}
    return json.dumps(config, sort_keys=True)


def _check_paths(plan: SessionPlan) -> None:
    for bind in plan.session.binds:
        if ":" in bind.target:  # Kubernetes refuses a mountPath with ':'
            raise UsageError(f"{bind.target!r} cannot be a mount path in a pod: Kubernetes refuses ':' in one",
                             hint="render a workspace whose path has no ':'")


def _ids(user: str) -> tuple[int, int]:
    uid, _, gid = user.partition(":")
    return int(uid), int(gid or uid)


def quantity(size: int) -> str:
    """Bytes as a Kubernetes quantity, in the largest binary unit that divides them."""
    for unit, shift in (("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if size and size % (1 << shift) == 0:
            return f"{size >> shift}{unit}"
    return str(size)


def _resources(limits: ContainerLimits | None) -> Object:
    """Memory as locally (a limit, a small request); the CPU weights as requests of the same ratio (the
    kubelet derives a container's weight from its request: the filter stays above the session); no CPU
    limit, as locally. Processes: a pod-wide limit is the kubelet's (--pod-max-pids), not the pod's."""
    if limits is None:
        return {}
    resources: Object = {"requests": {"cpu": f"{max(1, limits.cpu_shares * CPU_PER_SHARE_MILLI // 1024)}m"}}
    if limits.memory is not None:
        resources["limits"] = {"memory": quantity(limits.memory)}
        resources["requests"]["memory"] = quantity(min(limits.memory, MEMORY_REQUEST))
    return resources


def _pod_spec(plan: SessionPlan, target: KubernetesTarget, name: str, session_user: tuple[int, int],
              proxy: PodProxy | None) -> Object:
    volumes, session_mounts = _session_volumes(plan, target, name)
    volumes.append({"name": "filter-run", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}})
    volumes.append({"name": "filter-control", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}})
    sidecars = [_filter_container(plan.filter, target, name)]
    if proxy is not None:
        volumes.append({"name": "proxy-records", "emptyDir": {"sizeLimit": "256Mi"}})
        sidecars.append(_proxy_container(proxy, target, name))
        if proxy.intercept:  # the session CA the proxy makes, where the session's tools look (read-only)
            volumes.append({"name": "proxy-trust", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}})
            session_mounts.append({"name": "proxy-trust", "mountPath": f"{SESSION_HOME}/{SESSION_TRUST_DIR}",
                                   "readOnly": True})
    # The filter's resolver first. After it, with a proxy, the cluster's DNS: a name the filter refuses
    # is asked there next; only the proxy's uid may reach it (the ruleset), so the proxy resolves its
    # routes' upstreams and everyone else's retry is refused.
    nameservers = ["127.0.0.1", *(plan.upstreams if proxy is not None else ())]
    spec: Object = {
        "restartPolicy": "Never",
        # The session gets no way to the cluster's API and no list of its services.
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostname": plan.filter.hostname or "dejima",
        # The filter's resolver is the only DNS (as locally: the session's resolv.conf names 127.0.0.1).
        "dnsPolicy": "None",
        "dnsConfig": {"nameservers": nameservers, "options": [{"name": "ndots", "value": "0"}]},
        "securityContext": {
            "seccompProfile": {"type": "RuntimeDefault"},
            "sysctls": [{"name": key, "value": value} for key, value in sorted(plan.filter.sysctls.items())],
        },
        "terminationGracePeriodSeconds": max(1, int(target.stop_timeout)),
        "initContainers": sidecars,
        "containers": [_session_container(plan.session, target, session_user, session_mounts,
                                          plan.credential_env if proxy is None else (),
                                          tuple(dict.fromkeys(p.session_port for p in plan.filter.ports)))],
        "volumes": volumes,
    }
    if target.runtime_class:
        spec["runtimeClassName"] = target.runtime_class
    return spec


def _probes(command: tuple[str, ...], target: KubernetesTarget) -> tuple[Object, Object]:
    """(startup, readiness) probes of a sidecar: every second; the start may take the filter's ready timeout."""
    startup = {"exec": {"command": list(command)}, "periodSeconds": 1, "timeoutSeconds": 5,
               "failureThreshold": max(1, int(target.ready_timeout))}
    return startup, {**startup, "failureThreshold": 3}


def _unprivileged(uid: int, gid: int) -> Object:
    """The proxy's and the session's security context: a non-root uid, every capability dropped, no way
    to gain privileges, a read-only root (what they write goes to their volumes)."""
    return {
        "runAsUser": uid,
        "runAsGroup": gid,
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _filter_container(filter_spec: ContainerSpec, target: KubernetesTarget, name: str) -> Object:
    startup, readiness = _probes(PROBE, target)
    return {
        "name": "filter",
        "image": target.filter_image,
        # A native sidecar: it keeps running beside the session, and the session starts only after its
        # startup probe passed, i.e. after the ruleset was verified.
        "restartPolicy": "Always",
        "env": [{"name": FILTER_CONFIG_ENV,
                 "valueFrom": {"configMapKeyRef": {"name": f"{name}-config", "key": CONFIG_KEY}}}],
        "securityContext": {
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": list(filter_spec.cap_add)},
            "readOnlyRootFilesystem": filter_spec.read_only_rootfs,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "startupProbe": startup,
        "readinessProbe": readiness,
        "resources": _resources(filter_spec.limits),
        "volumeMounts": [{"name": "filter-run", "mountPath": FILTER_RUN_DIR},
                         {"name": "filter-control", "mountPath": CONTROL_DIR}],
    }


def _proxy_container(proxy: PodProxy, target: KubernetesTarget, name: str) -> Object:
    """The credential proxy: the secrets from the Secret (by reference), the routes from the ConfigMap,
    its socket in the filter's volume (the session mounts neither), its own uid."""
    startup, readiness = _probes(PROXY_PROBE, target)
    return {
        "name": "proxy",
        "image": target.filter_image,  # the filter's image holds the proxy's code (docker/README.md)
        "command": list(PROXY_COMMAND),
        "restartPolicy": "Always",
        "env": [{"name": PROXY_CONFIG_ENV,
                 "valueFrom": {"configMapKeyRef": {"name": f"{name}-config", "key": PROXY_CONFIG_KEY}}},
                *({"name": variable, "valueFrom": {"secretKeyRef": {"name": secret_name(name), "key": variable}}}
                  for variable in proxy.variables),
                *({"name": variable, "valueFrom": {"secretKeyRef": {"name": secret_name(name), "key": variable,
                                                                    "optional": True}}}
                  for variable in proxy.optional)],
        "securityContext": _unprivileged(PROXY_UID, PROXY_UID),
        "startupProbe": startup,
        "readinessProbe": readiness,
        "resources": {"requests": {"cpu": f"{CPU_PER_SHARE_MILLI}m", "memory": quantity(MEMORY_REQUEST)},
                      "limits": {"memory": quantity(PROXY_MEMORY)}},
        "volumeMounts": [{"name": "filter-run", "mountPath": FILTER_RUN_DIR},
                         {"name": "proxy-records", "mountPath": PROXY_RECORDS_DIR},
                         *([{"name": "proxy-trust", "mountPath": PROXY_TRUST_DIR}] if proxy.intercept else [])],
    }


def _session_volumes(plan: SessionPlan, target: KubernetesTarget, name: str) -> tuple[list[Object], list[Object]]:
    """The volumes and the session's mounts, from the plan's binds: the workspace is the claim, the
    home and caches are the pod's own (emptyDir), read-only paths are the workspace's subpaths; the
    resolv.conf and the start gate are the pod's DNS settings and its start order."""
    claim = target.workspace_claim or f"dejima-workspace-{name.removeprefix('dejima-').rsplit('-', 1)[0]}"[:63]
    volumes: list[Object] = [{"name": "workspace", "persistentVolumeClaim": {"claimName": claim}}]
    mounts: list[Object] = []
    caches = 0
    for bind in plan.session.binds:
        if bind.target in ("/etc/resolv.conf", GATE_DIR):
            continue
        if bind.target == plan.workspace:
            mounts.append({"name": "workspace", "mountPath": bind.target})
        elif bind.target == SESSION_HOME:
            volumes.append({"name": "home", "emptyDir": {}})
            mounts.append({"name": "home", "mountPath": SESSION_HOME})
        elif bind.read_only and PurePosixPath(bind.target).is_relative_to(plan.workspace):
            mounts.append({"name": "workspace", "mountPath": bind.target, "readOnly": True,
                           "subPath": str(PurePosixPath(bind.target).relative_to(plan.workspace))})
        else:
            caches += 1
            volumes.append({"name": f"cache-{caches}", "emptyDir": {}})
            mounts.append({"name": f"cache-{caches}", "mountPath": bind.target, "readOnly": bind.read_only})
    tmp = plan.session.limits.tmp_size if plan.session.limits else None
    volumes.append({"name": "tmp", "emptyDir": {"medium": "Memory", **({"sizeLimit": quantity(tmp)} if tmp else {})}})
    mounts.append({"name": "tmp", "mountPath": "/tmp"})
    return volumes, mounts


def _session_container(session: ContainerSpec, target: KubernetesTarget, user: tuple[int, int],
                       mounts: list[Object], credential_env: tuple[str, ...], ports: tuple[int, ...]) -> Object:
    container: Object = {
        "name": "session",
        "image": target.session_image,
    }
    if session.command is not None:
        container["args"] = list(session.command)  # the image's entrypoint runs it, as locally
    if session.working_dir:
        container["workingDir"] = session.working_dir
    container["env"] = [{"name": key, "value": value} for key, value in session.environment.items()
                        if key not in credential_env]
    container["securityContext"] = _unprivileged(*user)
    if ports:
        container["ports"] = [{"containerPort": port, "protocol": "TCP"} for port in ports]
    container["resources"] = _resources(session.limits)
    container["volumeMounts"] = mounts
    if session.tty:
        container["stdin"] = container["tty"] = True
    return container


def _network_policy(plan: SessionPlan, pod_labels: dict[str, str], proxy: PodProxy | None) -> Object:
    """The pod may send only to its DNS upstreams (port 53), what the policy allows (literal networks as
    they are, names to public addresses only) and its proxy's routes' ports on public addresses; nothing
    may reach it but its published ports, from the namespace's pods (its Service's clients)."""
    rules: list[Object] = [{
        "to": [{"ipBlock": {"cidr": f"{upstream}/32"}} for upstream in plan.upstreams],
        "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
    }] if plan.upstreams else []
    name_ports: set[int | None] = set()
    for entry in plan.policy.allowed:
        if entry.network is None:
            name_ports.add(entry.port)
            continue
        if entry.network.version == 4:
            rules.append({"to": [{"ipBlock": {"cidr": str(entry.network)}}], **_ports(entry.port)})
    answers = [n for n in plan.policy.answer_networks if n.version == 4]
    public = [{"ipBlock": {"cidr": "0.0.0.0/0",
                           "except": [str(n) for n in NOT_PUBLIC if not any(n.overlaps(a) for a in answers)]}}]
    if name_ports:
        ports: Object = {} if None in name_ports else {
            "ports": [{"protocol": "TCP", "port": port} for port in sorted(p for p in name_ports if p is not None)]}
        rules.append({"to": public, **ports})
    if proxy is not None:
        rules.append({"to": public, "ports": [{"protocol": "TCP", "port": port} for port in proxy.ports]})
    published = tuple(dict.fromkeys(p.session_port for p in plan.filter.ports))
    ingress = [{"from": [{"podSelector": {}}], "ports": [{"protocol": "TCP", "port": port} for port in published]}
               ] if published else []
    return {"podSelector": {"matchLabels": dict(pod_labels)}, "policyTypes": ["Ingress", "Egress"],
            "ingress": ingress, "egress": rules}


def _ports(port: int | None) -> Object:
    return {} if port is None else {"ports": [{"protocol": "TCP", "port": port}]}
