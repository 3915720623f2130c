"""The images a start would use: for a project (its workspace's owner, the layers of the manifests the start
would pick there), or for the current settings alone; found without pulling or building.

`dejima doctor` checks (with --build: makes) a project's, so right after a start it checks what that start
built; `dejima images list` marks them among the images dejima made.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dejima.adapters import host
from dejima.adapters.image_builds import Base, find_base, recipes, resolve_base
from dejima.adapters.runtime import Runtime
from dejima.core.images import NO_LAYERS, ImageLayers, ImageRecipe
from dejima.core.plan import Identity
from dejima.core.settings import Settings
from dejima.errors import InputError
from dejima.orchestration.session_reporter import SessionReporter


@dataclass(frozen=True, slots=True)
class ProjectImages:
    """The base, and the recipes of the filter and session images a start would use."""

    base: Base
    filter: ImageRecipe
    session: ImageRecipe
    identity: Identity  # whom the session image is made for
    chosen_for: str  # in words: "/path/project (harness shell, workflows python)", or "the current settings"

    @property
    def tags(self) -> tuple[str, str]:
        return self.filter.tag, self.session.tag


@dataclass(frozen=True, slots=True)
class _Project:
    workspace: Path
    identity: Identity
    layers: ImageLayers
    words: str


def _project(directory: Path, harness: str, ui: SessionReporter) -> _Project | None:
    """What a start on ``directory`` would make its session image for; None when a start there would be
    refused (no workspace: the home directory, a missing path, a broken harness)."""
    from dejima.orchestration.start_request import Selection, resolve_manifests, validate_workspace

    try:
        workspace = validate_workspace(str(directory))
        identity = _identity(workspace)
        resolved = resolve_manifests(workspace, Selection(harness), ui)
    except InputError:
        return None
    workflows = [c.manifest.name for c in resolved.choices if c.manifest.kind == "workflows"]
    words = f"harness {harness}" + (f", workflows {', '.join(workflows)}" if workflows else "")
    return _Project(workspace, identity, resolved.image_layers(), words)


def _identity(workspace: Path) -> Identity:
    """Whom a start on ``workspace`` runs its session as; a root launcher on a root-owned workspace starts
    only with --as-root (quickstart passes it), as root."""
    try:
        return host.session_identity(workspace, as_root=False)
    except InputError as exc:
        if exc.reference != "session-as-root":
            raise
        return host.session_identity(workspace, as_root=True)


def project_images(runtime: Runtime, settings: Settings, directory: Path | None, ui: SessionReporter,
                   harness: str = "shell", build: bool = False) -> ProjectImages | None:
    """The images a start on ``directory`` would use (None, or no workspace: the current settings' own, for
    the launcher's user, no layers); None when the base is not on the engine (``build``: pulled or made
    first, as a start does)."""
    base = resolve_base(runtime, settings, ui) if build else find_base(runtime, settings)
    if base is None:
        return None
    project = _project(directory, harness, ui) if directory is not None else None
    if project is None:
        identity = host.identity()
        filter_recipe, session_recipe = recipes(base, settings, identity, NO_LAYERS)
        unusable = f" ({directory} is no workspace)" if directory is not None else ""
        return ProjectImages(base, filter_recipe, session_recipe, identity, f"the current settings{unusable}")
    filter_recipe, session_recipe = recipes(base, settings, project.identity, project.layers)
    return ProjectImages(base, filter_recipe, session_recipe, project.identity,
                         f"{project.workspace} ({project.words})")
