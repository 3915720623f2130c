"""`dejima PATH --render kubernetes|pod`: the session as a cluster's objects (core/kubernetes.py).

The plan is the one `--render` makes (the start's steps, dry: no secret read), with the cluster's DNS
as the filter's upstream and the routes a pod can serve; the pod's proxy container gets those routes
as a document (proxy/pod.py) and their secrets from a Kubernetes Secret the user makes.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from dejima.adapters import host
from dejima.core.kubernetes import (
    KubernetesTarget,
    ObjectKind,
    PodProxy,
    check_settings,
    kubernetes_objects,
    kubernetes_yaml,
    object_name,
    secret_name,
)
from dejima.core.resolve import Resolved
from dejima.core.settings import Settings
from dejima.orchestration.session_reporter import SessionReporter
from dejima.orchestration.start_request import Options

if TYPE_CHECKING:
    from dejima.core.route_plan import RoutesPlan


def render_kubernetes(workspace: Path, command: tuple[str, ...] | None, resolved: Resolved, settings: Settings,
                      options: Options, ui: SessionReporter, kind: ObjectKind) -> str:
    """The YAML for kubectl apply; what only a cluster can say comes from [kubernetes]."""
    from dejima.orchestration.start import render_start
    from dejima.proxy.pod import not_carried

    cluster = settings.kubernetes
    upstreams = options.upstream_dns or cluster.dns_upstreams
    check_settings({"filter_image": cluster.filter_image, "session_image": cluster.session_image,
                    "dns_upstreams": upstreams}, str(host.settings_path()))
    left_out = {route.name: why for m in resolved.manifests for route in m.credentials
                if (why := not_carried(route)) is not None}
    for name, why in left_out.items():
        ui.warn(f"credential route {name} is left out of the pod: {why}, which a pod's proxy cannot do yet "
                "(docs/kubernetes.md)")
    served = replace(resolved, choices=tuple(
        replace(c, manifest=replace(c.manifest, credentials=tuple(r for r in c.manifest.credentials
                                                                  if r.name not in left_out)))
        for c in resolved.choices))
    planned = render_start(workspace, command, served, settings, replace(options, upstream_dns=upstreams), ui,
                           object_name(str(workspace)))
    target = KubernetesTarget(kind, cluster.filter_image, cluster.session_image, cluster.namespace,
                              cluster.workspace_claim, cluster.runtime_class, settings.session.ready_timeout,
                              settings.session.stop_timeout)
    proxy = _pod_proxy(planned.routes)
    text = kubernetes_yaml(kubernetes_objects(planned.session, target, proxy, tuple(left_out)))
    if proxy is not None:  # the one object the render does not write: it would hold the secrets
        namespace = f" -n {cluster.namespace}" if cluster.namespace else ""
        secret = secret_name(object_name(str(workspace)))
        ui.info(f"the pod's credential proxy reads {', '.join(proxy.variables)} from the Secret {secret}; make "
                f"it first: kubectl{namespace} create secret generic {secret} "
                + " ".join(f"--from-literal={v}=\"${v}\"" for v in proxy.variables))
    return text


def _pod_proxy(routes: RoutesPlan | None) -> PodProxy | None:
    if routes is None:
        return None
    import json

    from dejima.proxy.pod import pod_document, secret_variables

    document = pod_document(routes)
    ports = sorted({planned.route.upstream.port for planned in routes.routes})
    needed, optional = secret_variables(document)
    return PodProxy(json.dumps(document, sort_keys=True), needed, tuple(ports), routes.names, routes.canaries,
                    tuple(routes.intercepted), optional)
