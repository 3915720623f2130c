"""What `dejima sessions`, `stop`, `clean`, `doctor`, `images`, `settings` and `manifests` do. The engine's
functions work on the sessions and images of this installation's scope (``$DEJIMA_SCOPE``), as the command line
does."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dejima.api.reporting import _quiet
from dejima.errors import InputError, UsageError

if TYPE_CHECKING:
    from dejima.adapters.image_builds import Base as BaseImage
    from dejima.core.manifest import Manifest
    from dejima.core.settings import Settings
    from dejima.orchestration.doctor import Check as DoctorCheck
    from dejima.orchestration.manage_sessions import SessionInfo
    from dejima.orchestration.session_doctor import SessionCheck
    from dejima.orchestration.session_reporter import SessionReporter as Reporter


def sessions() -> list[SessionInfo]:
    """The sessions of this scope on the engine, by id, as `dejima sessions --json` lists them: ``SessionInfo``
    (``session_id``, ``workspace``, ``status``: running, starting (one container so far) or stale (its launcher is
    gone), ``containers``: short ids, ``launcher_pid``; ``.to_json()``: the command line's object)."""
    from dejima.adapters import host
    from dejima.adapters.runtime import connect
    from dejima.orchestration import manage_sessions

    runtime = connect()
    return manage_sessions.list_sessions(runtime, host.scope())


def stop(session_id: str) -> list[str]:
    """Stop a session of this scope and remove its containers (the filter stopped gently, its records kept), as
    `dejima stop SESSION`; returns the containers' ids. ``UsageError`` when no such session has a container."""
    from dejima.adapters import host
    from dejima.adapters.runtime import connect
    from dejima.orchestration import manage_sessions

    runtime = connect()
    return manage_sessions.stop_session(runtime, host.scope(), session_id, host.load_settings().session.stop_timeout)


def clean(*, everything: bool = False, reporter: Reporter | None = None) -> int:
    """Remove the sessions of this scope whose launcher is gone (their filters' refusals recorded first), as `dejima
    clean`; ``everything``: every session of this scope, running ones too (`--all`). Each removal is reported to
    ``reporter``. Returns how many sessions were removed. Per-project home directories are kept."""
    from dejima.adapters import host
    from dejima.adapters.runtime import connect
    from dejima.orchestration import manage_sessions

    runtime = connect()
    return manage_sessions.clean(runtime, host.scope(), _quiet(reporter), everything=everything)


def _settings(settings: Settings | None) -> Settings:
    from dejima.adapters import host

    return settings if settings is not None else host.load_settings()


def doctor(*, build: bool = False, settings: Settings | None = None, reporter: Reporter | None = None,
           workspace: str | os.PathLike[str] | None = None, harness: str = "shell") -> list[DoctorCheck]:
    """Whether this machine holds the boundary, as `dejima doctor --json`: ``DoctorCheck`` (``name``, ``ok``,
    ``detail``) in order: the engine, the docker CLI, the images, a decoy an unfiltered container reaches, nftables
    in a filter, and that a real session cannot reach that decoy. The images are those a start on ``workspace``
    with ``harness`` would use (its owner, its manifests' layers; None: the current settings' own). A failed check
    stops the ones after it (an unreachable engine is a failed check, not an error); all passed when every ``ok``
    is true. ``build``: build (or bootstrap) missing images first, reported to ``reporter``. Traffic goes only to
    containers the doctor starts."""
    from dejima.orchestration.doctor import run_doctor

    return run_doctor(_settings(settings), _quiet(reporter), build, Path(workspace) if workspace is not None else None,
                      harness)


def doctor_session(session: str, *, refused_address: str | None = None, refused_port: int | None = None,
                   foreign_resolver: str | None = None,
                   answer_names: tuple[str, ...] | None = None) -> tuple[str, list[SessionCheck]]:
    """The escape checks run from inside the running session ``session`` (its id or a unique prefix), as `dejima
    doctor --session`: the session's id and each check's ``SessionCheck`` (``name``, ``status``: holds, FAILED,
    unproven or skipped, ``detail``, ``ok``). ``refused_address``/``refused_port`` and ``foreign_resolver``: where
    the refused-address and other-resolver probes aim (default documentation addresses the filter refuses before
    they leave); ``answer_names``: the names asked of dejima's resolver, whose answers must not point at the gateway
    or the metadata address. ``UsageError`` when no running session has that name; ``EngineError`` when the engine
    fails."""
    from dataclasses import replace

    from dejima.adapters.runtime import connect
    from dejima.core.boundary_checks import DEFAULT_TARGETS
    from dejima.orchestration.session_doctor import check_session

    targets = DEFAULT_TARGETS
    if refused_address is not None:
        targets = replace(targets, refused_address=refused_address)
    if refused_port is not None:
        targets = replace(targets, refused_port=refused_port)
    if foreign_resolver is not None:
        targets = replace(targets, foreign_resolver=foreign_resolver)
    if answer_names is not None:
        from dejima.core.egress import normalise_name

        try:
            targets = replace(targets, answer_names=tuple(normalise_name(name) for name in answer_names))
        except ValueError as exc:
            raise UsageError(f"a name to resolve: {exc}", hint="--resolve metadata.google.internal") from None
    return check_session(connect(), session, targets)


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """An image dejima made, as the engine holds it: ``id`` (``sha256:...``), ``role`` (filter, session, base...),
    ``tags`` (none when untagged) and ``size`` in bytes."""

    id: str
    role: str
    tags: tuple[str, ...]
    size: int


def images() -> list[ImageInfo]:
    """The images dejima made on the engine (of any scope and installation: those carrying its role label), as
    `dejima images list` shows them; ``images_in_use`` says which of them the current settings and a project use."""
    from dejima.adapters.runtime import connect
    from dejima.core import labels

    return [ImageInfo(image["Id"], (image.get("Labels") or {}).get(labels.ROLE, "?"),
                      tuple(image.get("RepoTags") or ()), int(image.get("Size", 0)))
            for image in connect().images({labels.ROLE: ""})]


@dataclass(frozen=True, slots=True)
class ImageUse:
    """An image a start would use: ``tag``, ``role`` (base, filter or session), ``used_by`` (in words: "the current
    settings", or the project and the manifests it was chosen for) and whether the engine has it (``present``)."""

    tag: str
    role: str
    used_by: str
    present: bool


def images_in_use(workspace: str | os.PathLike[str] | None = None, *, harness: str = "shell",
                  settings: Settings | None = None, reporter: Reporter | None = None) -> list[ImageUse]:
    """The filter and session images of the current settings, then those a start on ``workspace`` with ``harness``
    would use (its owner, its manifests' layers), when they differ; nothing is pulled or built (an empty list when
    the base is not on the engine), as `dejima images list` marks them."""
    from dejima.adapters.runtime import connect
    from dejima.orchestration.project_images import project_images

    runtime, chosen, said = connect(), _settings(settings), _quiet(reporter)
    wanted = [project_images(runtime, chosen, None, said)]
    if workspace is not None:
        wanted.append(project_images(runtime, chosen, Path(workspace), said, harness))
    uses: dict[str, ImageUse] = {}
    for images in (w for w in wanted if w is not None):
        roles = (("base", images.base.ref), (images.filter.role, images.filter.tag),
                 (images.session.role, images.session.tag))
        for role, tag in roles:
            if tag not in uses:
                uses[tag] = ImageUse(tag, role, images.chosen_for, runtime.image_id(tag) is not None)
    return list(uses.values())


def build_images(*, force: bool = False, settings: Settings | None = None, reporter: Reporter | None = None,
                 on_built: Callable[[str, str], None] | None = None) -> dict[str, str]:
    """Make sure the filter and session images of ``settings`` (None: the user's) exist, building what is missing
    (``force``: rebuild them) on the base (pulled, or made with debootstrap when the settings allow it), as `dejima
    images build`; progress goes to ``reporter``. Returns each role's tag (filter, then session), each also handed
    to ``on_built(role, tag)`` once it is there."""
    from dejima.adapters import host
    from dejima.adapters.image_builds import ensure_image, recipes, resolve_base
    from dejima.adapters.runtime import connect

    runtime = connect()
    chosen, said = _settings(settings), _quiet(reporter)
    built: dict[str, str] = {}
    for recipe in recipes(resolve_base(runtime, chosen, said), chosen, host.identity()):
        built[recipe.role] = ensure_image(runtime, recipe, said, force=force)
        if on_built is not None:
            on_built(recipe.role, built[recipe.role])
    return built


def bootstrap_base(*, settings: Settings | None = None, reporter: Reporter | None = None) -> BaseImage:
    """Make the Debian base with debootstrap now (needs root), as `dejima images bootstrap`: ``BaseImage`` (``ref``,
    ``id``, ``bootstrapped``). Its progress goes to ``reporter``, the whole log to the state directory's logs/."""
    from dejima.adapters.image_builds import make_bootstrap_base
    from dejima.adapters.runtime import connect

    runtime = connect()
    return make_bootstrap_base(runtime, _settings(settings), _quiet(reporter))


def prune_images(*, settings: Settings | None = None, reporter: Reporter | None = None) -> tuple[int, int]:
    """Remove the filter and session images the current code and ``settings`` no longer use, as `dejima images
    prune` (base images are kept). Returns (removed, kept because a container still uses them); each image kept is
    reported to ``reporter``."""
    from dejima.adapters import host
    from dejima.adapters.image_builds import prune_images as prune
    from dejima.adapters.runtime import connect

    runtime = connect()
    return prune(runtime, _settings(settings), host.identity(), _quiet(reporter))


def settings_path() -> Path:
    """The user's settings file: ``$DEJIMA_SETTINGS``, else ``$XDG_CONFIG_HOME/dejima/settings.toml`` (it may be
    absent: the defaults then), as `dejima settings path` prints it."""
    from dejima.adapters import host

    return host.settings_path()


def settings_reference() -> str:
    """Every settings key with its kind, default and help, as `dejima settings reference` prints it (Markdown)."""
    from dejima.core.settings import render_settings_reference

    return render_settings_reference()


@dataclass(frozen=True, slots=True)
class ManifestInfo:
    """A manifest file as `dejima manifests list` shows it: ``kind`` (one of ``MANIFEST_KINDS``), ``name``,
    ``source`` (the file), ``description`` (None for a broken one), ``overrides`` (the shipped file a user file
    replaces, if it does) and ``error`` (why a broken one is refused: an ``InputError`` with its hint; None when it is
    sound)."""

    kind: str
    name: str
    source: str
    description: str | None
    overrides: str | None
    error: InputError | None

    @property
    def ref(self) -> str:
        """``KIND/NAME``, as `dejima manifests show` takes it."""
        return f"{self.kind}/{self.name}"

    @property
    def broken(self) -> bool:
        return self.error is not None


def manifests() -> list[ManifestInfo]:
    """Every forge, workflow, harness and backend manifest, shipped and the user's (``$XDG_CONFIG_HOME/dejima/
    <kind>/``, which override shipped ones by name), broken ones included, by kind and name. A broken one stops only
    the sessions that would use it."""
    from dejima.adapters.manifest_files import load_catalog

    catalog = load_catalog()
    found = [ManifestInfo(m.kind, m.name, m.source, m.description, catalog.overridden.get((m.kind, m.name)), None)
             for m in catalog.manifests.values()]
    found += [ManifestInfo(b.kind, b.name, b.source, None, catalog.overridden.get((b.kind, b.name)), b.error)
              for b in catalog.broken.values()]
    return sorted(found, key=lambda info: (info.kind, info.name))


def manifest(kind: str, name: str) -> Manifest:
    """One manifest as sessions use it (its domains, environment, credential routes, image layers), as `dejima
    manifests show KIND/NAME`; a user's file overrides the shipped one of its name. A broken one raises its error (an
    ``InputError``), as does a name that is no manifest; ``UsageError`` for a kind not in ``MANIFEST_KINDS``."""
    from dejima.adapters.manifest_files import load_catalog
    from dejima.core.manifest import KINDS

    if kind not in KINDS:
        raise UsageError(f"no manifest kind {kind!r}", hint=f"kinds: {', '.join(KINDS)}")
    return load_catalog().get(kind, name)


def manifest_reference() -> str:
    """Every key of the manifest format, as `dejima manifests reference` prints it (Markdown)."""
    from dejima.core.manifest import render_manifest_reference

    return render_manifest_reference()
