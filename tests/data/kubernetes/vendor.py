"""Re-make the vendored schemas in this folder (see README.md): not run by the tests.

    python3 tests/data/kubernetes/vendor.py DEFINITIONS_JSON [SANDBOX_CRD_YAML]

DEFINITIONS_JSON: kubernetes_validate/kubernetes-json-schema/v1.37.0-local-strict/_definitions.json from the
PyPI wheel kubernetes-validate 1.37.0; SANDBOX_CRD_YAML: helm/crds/agents.x-k8s.io_sandboxes.yaml at
kubernetes-sigs/agent-sandbox tag v0.5.6 (left out: the Sandbox's schema is kept as it is). Descriptions are
dropped (size); nothing else changes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).parent
ROOTS = ("io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.PodSpec", "io.k8s.api.core.v1.ConfigMap",
         "io.k8s.api.networking.v1.NetworkPolicy", "io.k8s.api.core.v1.Service")
PREFIX = "/api/_definitions.json#/$defs/"


def undescribed(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: undescribed(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [undescribed(v) for v in node]
    return node


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
        return found + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def local(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: ("#/$defs/" + v.split("/$defs/", 1)[1] if k == "$ref" else local(v)) for k, v in node.items()}
    if isinstance(node, list):
        return [local(v) for v in node]
    return node


def main(definitions: str, crd: str | None = None) -> None:
    defs = json.loads(Path(definitions).read_text())["$defs"]
    kept: dict[str, Any] = {}
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        kept[name] = undescribed(defs[name])
        todo += [r.split("/$defs/", 1)[1] for r in refs(kept[name])]
    core = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$defs": local(dict(sorted(kept.items())))}
    (HERE / "kubernetes-v1.37.0-strict.json").write_text(json.dumps(core, indent=1, sort_keys=True) + "\n")
    if crd is None:
        return
    document = yaml.safe_load(Path(crd).read_text())
    version = next(v for v in document["spec"]["versions"] if v["name"] == "v1beta1")
    sandbox = undescribed(version["schema"]["openAPIV3Schema"])
    (HERE / "agent-sandbox-v0.5.6-sandbox-v1beta1.json").write_text(json.dumps(sandbox, indent=1, sort_keys=True)
                                                                     + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
