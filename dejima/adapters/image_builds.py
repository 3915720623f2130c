"""Ensures the filter and session images exist: resolve the base, then build what is missing.

Each image is looked up by its recipe hash; it is built (with visible progress) only when no
image carries that hash. When the configured base cannot be pulled, dejima makes its own
Debian base with debootstrap if the settings allow it, and says so.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dejima.adapters import host, packaged, venv_record
from dejima.adapters.host import image_cas
from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.core.images import (
    NO_LAYERS,
    ImageLayers,
    ImageNeeds,
    ImageRecipe,
    bootstrap_base_tag,
    build_filter_recipe,
    build_session_recipe,
)
from dejima.core.plan import Identity
from dejima.core.report import Reporter
from dejima.core.settings import Settings
from dejima.errors import EngineError, ImageError


@dataclass(frozen=True, slots=True)
class Base:
    ref: str
    id: str
    bootstrapped: bool


def find_base(runtime: Runtime, settings: Settings) -> Base | None:
    """The base already on the engine: the configured one, else an earlier debootstrapped one."""
    images = settings.images
    found = runtime.image_id(images.base)
    if found:
        return Base(images.base, found, bootstrapped=False)
    if images.base_fallback == "debootstrap":
        fallback_tag = bootstrap_base_tag(images.bootstrap_suite)
        existing = runtime.image_id(fallback_tag)
        if existing:
            return Base(fallback_tag, existing, bootstrapped=True)
    return None


class _PullFailed(Exception):
    """Ends the pull's progress step without its "done" line: what happened is said once, after it."""


def resolve_base(runtime: Runtime, settings: Settings, ui: Reporter) -> Base:
    """The configured base if present or pullable; else a debootstrapped one, announced."""
    images = settings.images
    fallback_tag = bootstrap_base_tag(images.bootstrap_suite)
    base = find_base(runtime, settings)
    if base is not None:
        if base.bootstrapped:
            ui.info(bootstrapped_note(settings))
        return base
    try:
        with ui.step(f"Pulling base image {images.base}"):
            reason = runtime.pull(images.base)
            if reason:
                raise _PullFailed(reason)
    except _PullFailed:
        pass
    if not reason:
        found = runtime.image_id(images.base)
        assert found is not None
        return Base(images.base, found, bootstrapped=False)
    if images.base_fallback == "none":
        raise ImageError(
            f"base image {images.base} cannot be pulled: {reason}",
            hint="pull it yourself, set [images] base to an image you have, or set "
            "[images] base_fallback = \"debootstrap\"",
        )
    ui.warn(f"base image {images.base} cannot be pulled ({reason}); making {fallback_tag} with "
            f"debootstrap from {images.bootstrap_mirror} (set [images] base_fallback = \"none\" to stop instead)")
    return make_bootstrap_base(runtime, settings, ui)


def bootstrapped_note(settings: Settings) -> str:
    images = settings.images
    return (f"using {bootstrap_base_tag(images.bootstrap_suite)} (made with debootstrap) because {images.base} is "
            f"not present; `docker pull {images.base}` to build on it instead")


def make_bootstrap_base(runtime: Runtime, settings: Settings, ui: Reporter) -> Base:
    images = settings.images
    from dejima.adapters.bootstrap import bootstrap_base  # debootstrap's helpers only when a base is made

    tag = bootstrap_base_tag(images.bootstrap_suite)
    with logged_step(ui, f"Bootstrapping Debian {images.bootstrap_suite} into {tag}", "bootstrap") as line:
        image = bootstrap_base(runtime, tag, images.bootstrap_suite, images.bootstrap_mirror, line)
    return Base(tag, image, bootstrapped=True)


LOGS_KEPT = 20  # build logs in the state directory's logs/, newest first


def _new_log(name: str) -> Path:
    directory = host.state_dir() / "logs"
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for old in sorted(directory.glob("*.log"), key=lambda p: p.stat().st_mtime, reverse=True)[LOGS_KEPT - 1:]:
        old.unlink(missing_ok=True)
    return directory / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns() % 10**6:06d}.log"


@contextmanager
def logged_step(ui: Reporter, title: str, name: str) -> Iterator[Callable[[str], None]]:
    """A long step whose every line (the engine's, apt's, npm's) goes to a log file the progress
    line names; a failure shows the last lines and the file."""
    log = _new_log(name)
    with open(log, "w", encoding="utf-8", errors="replace") as stream, ui.step(title, log=str(log)) as step:
        def line(text: str) -> None:
            stream.write(text + "\n")
            step.line(text)

        try:
            yield line
        except ImageError as exc:
            if not exc.context:
                exc.context = "\n".join(step.lines[-15:])
            exc.hint = f"{exc.hint}; the whole log: {log}" if exc.hint else f"the whole log: {log}"
            raise


def recipes(base: Base, settings: Settings, identity: Identity,
            layers: ImageLayers = NO_LAYERS) -> tuple[ImageRecipe, ImageRecipe]:
    cas = image_cas(settings.images.extra_ca_dir, settings.network.extra_ca)
    filter_recipe = build_filter_recipe(
        packaged.docker_template("filter"), base.ref, base.id, cas, packaged.filter_sources()
    )
    session_recipe = build_session_recipe(
        packaged.docker_template("session"), base.ref, base.id, cas, identity.uid, identity.gid, identity.name,
        layers, packaged.session_tools(),
    )
    return filter_recipe, session_recipe


def ensure_image(runtime: Runtime, recipe: ImageRecipe, ui: Reporter, force: bool = False) -> str:
    if not force and runtime.image_id(recipe.tag):
        return recipe.tag
    with logged_step(ui, f"Building the {recipe.role} image {recipe.tag}", f"build-{recipe.role}") as line:
        runtime.build(recipe, line)
    if recipe.role == labels.ROLE_SESSION:  # what its Python environments' own files are, for the exit audit
        try:
            with ui.step(f"Recording what {recipe.tag}'s python3 -m venv writes"):
                if venv_record.record(runtime, recipe.tag) is None:
                    raise _NotRecorded  # the step is not done: said below
        except _NotRecorded:
            ui.warn(f"could not record what {recipe.tag}'s python3 -m venv writes: a Python environment made in "
                    "its sessions is reported medium (its own files not verified) until a start records it")
    return recipe.tag


class _NotRecorded(Exception):
    """The venv probe of a session image made no record (venv_record.record says why it cannot)."""


def image_needs(runtime: Runtime, settings: Settings, identity: Identity, ui: Reporter,
                layers: ImageLayers = NO_LAYERS, found: Base | None = None) -> ImageNeeds:
    """The tags a start runs and the recipes of the images the engine lacks. The base must exist
    first (pulled, or made with debootstrap): the recipes hash its id into the tags. ``found``: the
    base the caller found on the engine already (find_base)."""
    # A base made with debootstrap earlier is said once per image built on it (below), not on every start.
    found = found if found is not None else find_base(runtime, settings)
    base = found if found is not None else resolve_base(runtime, settings, ui)  # pulled or made: it says so
    key = recipe_inputs_key(base, settings, identity, layers)
    known = TagCache().get(key)
    if known is not None and all(runtime.image_id(tag) for tag in known):
        return ImageNeeds(known)
    filter_recipe, session_recipe = recipes(base, settings, identity, layers)
    missing = tuple(r for r in (filter_recipe, session_recipe) if not runtime.image_id(r.tag))
    if missing and found is not None and found.bootstrapped:
        ui.info(bootstrapped_note(settings))
    return ImageNeeds((filter_recipe.tag, session_recipe.tag), missing, key)


def build_needed(runtime: Runtime, needs: ImageNeeds, ui: Reporter) -> None:
    """Build the images ``needs`` lacks, then remember its tags."""
    for recipe in needs.to_build:
        ensure_image(runtime, recipe, ui, force=True)
    if needs.cache_key:
        TagCache().put(needs.cache_key, needs.tags)


def ensure_images(runtime: Runtime, settings: Settings, identity: Identity, ui: Reporter,
                  layers: ImageLayers = NO_LAYERS) -> tuple[str, str]:
    """Tags of the filter and session images, building them first if needed."""
    needs = image_needs(runtime, settings, identity, ui, layers)
    build_needed(runtime, needs, ui)
    return needs.tags


RECIPE_KEY_VERSION = b"1"
RECIPE_CODE = ("core/images.py", "core/render.py", "adapters/image_builds.py")


def recipe_inputs_key(base: Base, settings: Settings, identity: Identity, layers: ImageLayers = NO_LAYERS) -> str:
    """A digest of everything ``recipes`` reads (templates, base, CAs, the filter's code, the user,
    the layers) and of the code that makes recipes: equal keys give equal recipes, so their tags
    can be remembered instead of rendering the Dockerfiles again (jinja2, ~20 ms) on every start."""
    digest = hashlib.sha256(RECIPE_KEY_VERSION)
    parts: list[tuple[str, bytes]] = [
        *((f"code/{name}", (packaged.PACKAGE_ROOT / name).read_bytes()) for name in RECIPE_CODE),
        ("base", f"{base.ref}\0{base.id}".encode()),
        ("filter", packaged.docker_template("filter").encode()),
        ("session", packaged.docker_template("session").encode()),
        ("identity", f"{identity.uid}:{identity.gid}:{identity.name}".encode()),
        ("layers", repr(layers).encode()),
        *((f"ca/{name}", data) for name, data in sorted(
            image_cas(settings.images.extra_ca_dir, settings.network.extra_ca).items())),
        *((f"source/{path}", data) for path, data in sorted(packaged.filter_sources().items())),
        *((f"session/{path}", data) for path, data in sorted(packaged.session_tools().items())),
    ]
    for name, data in parts:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return digest.hexdigest()


class TagCache:
    """Recipe keys to the (filter, session) tags they gave, in the launcher's state directory
    (never mounted into a session). A tag whose image is gone is found out by the caller."""

    KEEP = 32

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or host.state_dir() / "image-tags.json"

    def _read(self) -> dict[str, list[str]]:
        try:
            found = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return found if isinstance(found, dict) else {}

    def get(self, key: str) -> tuple[str, str] | None:
        tags = self._read().get(key)
        if isinstance(tags, list) and len(tags) == 2 and all(isinstance(t, str) for t in tags):
            return tags[0], tags[1]
        return None

    def put(self, key: str, tags: tuple[str, str]) -> None:
        entries = self._read()
        entries.pop(key, None)
        entries[key] = list(tags)
        kept = dict(list(entries.items())[-self.KEEP:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            host.write_atomically(self.path, json.dumps(kept).encode())
        except OSError:
            pass  # a cache: the next start renders the recipes again


def prune_images(runtime: Runtime, settings: Settings, identity: Identity, ui: Reporter,
                 keep: frozenset[str] = frozenset()) -> tuple[int, int]:
    """Remove filter and session images other than the ones the current recipes (and ``keep``) name.

    Returns (removed, kept because a container still uses them). Base images are kept.
    """
    base = find_base(runtime, settings)
    current = {r.tag for r in recipes(base, settings, identity)} if base is not None else set()
    current |= keep
    removed = kept = 0
    for image in runtime.images({labels.ROLE: ""}):
        role = (image.get("Labels") or {}).get(labels.ROLE)
        if role not in (labels.ROLE_FILTER, labels.ROLE_SESSION):
            continue
        for tag in image.get("RepoTags") or []:
            if tag in current:
                continue
            try:
                runtime.remove_image(tag)
                removed += 1
            except EngineError as exc:
                ui.info(f"kept {tag}: {exc.message}")
                kept += 1
    return removed, kept
