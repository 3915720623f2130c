"""Resolution: which manifests a session uses, why, and what they add up to.

    selection = harness (--harness, default shell)
              + backend (--backend, else the harness's default; must speak one of its APIs)
              + workflows (detected from marker files, plus --workflow)
              + forges (detected from git remote hosts, plus --forge)

Each chosen manifest carries the reason it was chosen, and everything it contributes keeps the
manifest's path, so the plan can say which file asked for each domain. The repository under
sandbox is not a trusted source: its ``.dejima.toml`` may only add deny entries.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from dataclasses import dataclass, field

from dejima.core.connect import Connect
from dejima.core.images import ImageLayers, InstallStep
from dejima.core.kinds import EGRESS_ENTRY, STR, reasons_name_denied
from dejima.core.manifest import BrokenManifest, Manifest, ManifestError, singular
from dejima.core.schema import Key, Table, check_data, did_you_mean, list_of, parse_toml, table, table_of

REPO_POLICY_FILE = ".dejima.toml"


@dataclass(frozen=True, slots=True)
class WorkspaceFacts:
    """What detection looks at: names at the workspace root, names one level below it
    (``backend/pyproject.toml``; dependency, build and hidden folders skipped) and the hosts of
    its git remotes."""

    root_files: frozenset[str] = frozenset()
    remote_hosts: frozenset[str] = frozenset()
    sub_files: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Choice:
    manifest: Manifest
    why: str  # "--harness", "default", "detected: Cargo.toml", "detected: remote github.com"


@dataclass(frozen=True, slots=True)
class RepoPolicy:
    """What the repository's own .dejima.toml may say: only narrowing entries."""

    deny: tuple[str, ...] = ()
    deny_reasons: dict[str, str] = field(default_factory=dict)
    ignored: tuple[str, ...] = ()  # keys that would widen the policy, refused and reported


@dataclass(frozen=True, slots=True)
class Resolved:
    choices: tuple[Choice, ...]
    repo: RepoPolicy = RepoPolicy()
    skipped: tuple[BrokenManifest, ...] = ()  # broken manifests this session does not need

    @property
    def manifests(self) -> tuple[Manifest, ...]:
        return tuple(c.manifest for c in self.choices)

    def of_kind(self, kind: str) -> list[Choice]:
        return [c for c in self.choices if c.manifest.kind == kind]

    @property
    def has_credentials(self) -> bool:
        """Whether a manifest declares a credential route: else the session has no proxy, no source to
        read and no push rule to make."""
        return any(m.credentials for m in self.manifests)

    @property
    def harness(self) -> Manifest:
        return self.of_kind("harnesses")[0].manifest

    @property
    def backend(self) -> Manifest | None:
        backends = self.of_kind("backends")
        return backends[0].manifest if backends else None

    def harness_connect(self) -> Connect | None:
        """How the harness reaches this session's backend, when it says (``[harness.connect.<api>]``)."""
        backend = self.backend
        return self.harness.connect.get(backend.api or "") if backend is not None else None

    def allow(self) -> list[tuple[str, str]]:
        """(entry, origin) for every allowed entry, in manifest order."""
        return [(entry, f"{m.source} network.allow") for m in self.manifests for entry in m.allow]

    def deny(self) -> list[tuple[str, str, str]]:
        """(entry, reason, origin) for every denied entry, the repository's included."""
        found = [(entry, m.deny_reasons.get(entry, ""), f"{m.source} network.deny")
                 for m in self.manifests for entry in m.deny]
        found += [(entry, self.repo.deny_reasons.get(entry, ""), f"{REPO_POLICY_FILE} network.deny (repository)")
                  for entry in self.repo.deny]
        return found

    def image_layers(self) -> ImageLayers:
        """Packages (sorted, once) and install steps (in manifest order, once) for the session image."""
        packages = sorted({p for m in self.manifests for p in m.packages})
        steps: list[InstallStep] = []
        for m in self.manifests:
            for command in m.install:
                if command not in [s.command for s in steps]:
                    steps.append(InstallStep(command, m.source))
        return ImageLayers(tuple(packages), tuple(steps))

    def environment(self) -> dict[str, str]:
        env: dict[str, str] = {}
        origin: dict[str, str] = {}
        for m in self.manifests:
            for key, value in m.env.items():
                if key in env and env[key] != value:
                    raise ManifestError(
                        f"{m.source}: env.{key} = {value!r} conflicts with {origin[key]}, which sets {env[key]!r}",
                        hint="override one of the two manifests in your config directory",
                        reference="manifest-conflict",
                    )
                env[key], origin[key] = value, m.source
        return env


def _detected(markers: tuple[str, ...], hosts: tuple[str, ...], facts: WorkspaceFacts) -> str | None:
    """Why a workflow (marker files) or forge (remote hosts) applies to the workspace, or None."""
    files = sorted(name for name in facts.root_files if any(fnmatch.fnmatchcase(name, p) for p in markers))
    if not files:  # a monorepo: markers one level down (backend/pyproject.toml, frontend/package.json)
        files = sorted(path for path in facts.sub_files
                       if any(fnmatch.fnmatchcase(path.rpartition("/")[2], p) for p in markers))
    if files:
        return f"detected: {', '.join(files[:3])}" + (f" (+{len(files) - 3})" if len(files) > 3 else "")
    remotes = sorted(h for h in facts.remote_hosts if h in hosts)
    return f"detected: git remote {remotes[0]}" if remotes else None


def detect_workflows(workflows: list[Manifest], facts: WorkspaceFacts) -> list[Choice]:
    found = [(m, _detected(m.marker_files, (), facts)) for m in workflows]
    return [Choice(m, why) for m, why in found if why]


def detect_forges(forges: list[Manifest], facts: WorkspaceFacts) -> list[Choice]:
    found = [(m, _detected((), m.remote_hosts, facts)) for m in forges]
    return [Choice(m, why) for m, why in found if why]


def _named(catalog: Mapping[tuple[str, str], Manifest], harness: str, backend: str | None,
           workflows: tuple[str, ...], forges: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """The manifests the selection names, each with who named it."""
    named = {("harnesses", harness): f"--harness {harness}" if harness != "shell" else "the default harness"}
    named |= {("workflows", n): f"--workflow {n}" for n in workflows} | {("forges", n): f"--forge {n}" for n in forges}
    default = catalog[("harnesses", harness)].default_backend if ("harnesses", harness) in catalog else None
    if backend is not None:
        named[("backends", backend)] = f"--backend {backend}"
    elif default is not None:
        named[("backends", default)] = f"the default backend of harness {harness}"
    return named


def _check_broken(broken: Mapping[tuple[str, str], BrokenManifest], facts: WorkspaceFacts,
                  named: dict[tuple[str, str], str]) -> tuple[BrokenManifest, ...]:
    """Raise the error of a broken manifest this session would use; the others, to mention."""
    for ref, manifest in sorted(broken.items()):
        if ref in named:
            raise manifest.needed(named[ref])
        if manifest.kind not in ("workflows", "forges"):
            continue
        if manifest.marker_files is None or manifest.remote_hosts is None:
            raise manifest.needed("its [detect] cannot be read, so whether it applies here cannot be told")
        why = _detected(manifest.marker_files, manifest.remote_hosts, facts)
        if why:
            raise manifest.needed(why)
    return tuple(manifest for _, manifest in sorted(broken.items()))


def resolve(catalog: Mapping[tuple[str, str], Manifest], facts: WorkspaceFacts, harness: str,
            backend: str | None = None, workflows: tuple[str, ...] = (), forges: tuple[str, ...] = (),
            repo: RepoPolicy = RepoPolicy(), broken: Mapping[tuple[str, str], BrokenManifest] | None = None,
            ) -> Resolved:
    """The manifests a session uses. A broken manifest stops it only when it would be used;
    the others come back in ``skipped``, for one warning line each."""
    named = _named(catalog, harness, backend, workflows, forges)
    skipped = _check_broken(broken or {}, facts, named)

    def get(kind: str, name: str, flag: str) -> Manifest:
        if (kind, name) not in catalog:
            names = sorted(n for k, n in catalog if k == kind)
            raise ManifestError(f"{flag} {name}: no such {singular(kind)}",
                                hint=f"{did_you_mean(name, names)}known {kind}: {', '.join(names) or 'none'}",
                                reference="unknown-manifest")
        return catalog[(kind, name)]

    harness_manifest = get("harnesses", harness, "--harness")
    choices = [Choice(harness_manifest, "--harness" if harness != "shell" else "default")]
    backend_name = backend or harness_manifest.default_backend
    if backend_name is not None:
        backend_manifest = get("backends", backend_name, "--backend")
        if backend_manifest.api not in harness_manifest.apis:
            speaks = ", ".join(harness_manifest.apis) or "no model API"
            raise ManifestError(
                f"harness {harness} speaks {speaks}, but backend {backend_name} speaks {backend_manifest.api}",
                hint=f"choose a backend that speaks {speaks} (--backend), or another harness",
                reference="manifest-conflict",
            )
        choices.append(Choice(backend_manifest, "--backend" if backend else f"default of {harness}"))
    all_workflows = [m for (k, _), m in sorted(catalog.items()) if k == "workflows"]
    all_forges = [m for (k, _), m in sorted(catalog.items()) if k == "forges"]
    chosen = {c.manifest.ref for c in choices}
    for choice in [*detect_workflows(all_workflows, facts), *detect_forges(all_forges, facts)]:
        if choice.manifest.ref not in chosen:
            choices.append(choice)
            chosen.add(choice.manifest.ref)
    for kind, names, flag in (("workflows", workflows, "--workflow"), ("forges", forges, "--forge")):
        for name in names:
            manifest = get(kind, name, flag)
            if manifest.ref not in chosen:
                choices.append(Choice(manifest, flag))
                chosen.add(manifest.ref)
    return Resolved(tuple(choices), repo, skipped)


REPO_POLICY = table(Table({"network": Key(table(Table({
    "deny": Key(list_of(EGRESS_ENTRY), "entries no session on this repository may reach"),
    "deny_reasons": Key(table_of(STR), "reason per deny entry, shown to the agent and the user"),
}, "[network]", rules=(reasons_name_denied,))), "the repository may only narrow the policy")}, "a repository policy"))
_NARROWING = ("deny", "deny_reasons")


def parse_repo_policy(text: str, source: str) -> RepoPolicy:
    """The repository's .dejima.toml: deny entries are kept; anything that could widen is not."""
    data = parse_toml(text, source, ManifestError, "fix it, or remove it: it may only narrow the policy anyway")
    network = data.get("network", {}) if isinstance(data.get("network"), dict) else {}
    ignored = [key for key in data if key != "network"]
    ignored += [f"network.{key}" for key in network if key not in _NARROWING]
    narrowing = {"network": {key: value for key, value in network.items() if key in _NARROWING}}
    checked = check_data(narrowing, REPO_POLICY, source, ManifestError)["network"]
    return RepoPolicy(checked.get("deny", ()), checked.get("deny_reasons", {}), tuple(ignored))
