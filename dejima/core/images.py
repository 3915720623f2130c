"""Image recipes: the exact inputs of each image dejima builds, and their content hash.

An image is rebuilt exactly when its recipe hash changes: the Dockerfile as rendered, every file
in the build context, and the id of the base image. The hash is the image's tag, so finding the
image is the cache lookup.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from dejima.core import labels
from dejima.core.paths import IMAGE_REPOSITORY

REPOSITORY = IMAGE_REPOSITORY
BOOTSTRAP_BASE = "dejima/base"


@dataclass(frozen=True, slots=True)
class ImageRecipe:
    role: str  # "filter" or "session"
    dockerfile: str
    files: tuple[tuple[str, bytes], ...]  # (path in the build context, content), sorted
    base_id: str

    @property
    def content_hash(self) -> str:
        digest = hashlib.sha256()
        for part in (self.role, self.base_id, self.dockerfile):
            digest.update(part.encode())
            digest.update(b"\0")
        for path, content in self.files:
            digest.update(path.encode())
            digest.update(b"\0")
            digest.update(hashlib.sha256(content).digest())
        return digest.hexdigest()

    @property
    def tag(self) -> str:
        return f"{REPOSITORY}/{self.role}:{self.content_hash[:16]}"

    @property
    def labels(self) -> dict[str, str]:
        return {labels.ROLE: self.role, labels.RECIPE_HASH: self.content_hash}


@dataclass(frozen=True, slots=True)
class ImageNeeds:
    """The images a start runs, by tag (filter, session), and the recipes of the ones the engine
    lacks: a start builds those, then remembers the tags under ``cache_key``."""

    tags: tuple[str, str]
    to_build: tuple[ImageRecipe, ...] = ()
    cache_key: str = ""  # the recipe inputs' digest (adapters/image_builds.recipe_inputs_key); "": not remembered


def _context_files(extra_cas: dict[str, bytes], sources: dict[str, bytes]) -> tuple[tuple[str, bytes], ...]:
    # The extra-ca directory always exists in the context (with a placeholder) so that the
    # Dockerfile's COPY works whether or not the host has extra CAs.
    files = {"extra-ca/.keep": b""}
    files.update({f"extra-ca/{name}": content for name, content in extra_cas.items()})
    files.update(sources)
    return tuple(sorted(files.items()))


def build_filter_recipe(
    template: str, base: str, base_id: str, extra_cas: dict[str, bytes], sources: dict[str, bytes]
) -> ImageRecipe:
    """``sources`` maps context paths (e.g. ``dejima/filter/nft.py``) to the filter's code."""
    from dejima.core.render import render_template_text  # jinja2 only when a recipe is built

    return ImageRecipe(
        role=labels.ROLE_FILTER,
        dockerfile=render_template_text(template, base=base),
        files=_context_files(extra_cas, sources),
        base_id=base_id,
    )


@dataclass(frozen=True, slots=True)
class InstallStep:
    command: str
    origin: str  # the manifest that asked for it


@dataclass(frozen=True, slots=True)
class ImageLayers:
    """What the chosen manifests add to the session image: Debian packages, then install steps."""

    packages: tuple[str, ...] = ()
    install: tuple[InstallStep, ...] = ()


NO_LAYERS = ImageLayers()
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+\Z")


def build_session_recipe(
    template: str, base: str, base_id: str, extra_cas: dict[str, bytes], uid: int, gid: int, user: str,
    layers: ImageLayers = NO_LAYERS, tools: dict[str, bytes] | None = None,
) -> ImageRecipe:
    """``tools`` maps context paths to what the session image holds of dejima's (the notice, dejima-why)."""
    from dejima.core.render import render_template_text  # jinja2 only when a recipe is built

    bad = [p for p in layers.packages if not _PACKAGE.match(p)]
    if bad:
        raise ValueError(f"not Debian package names: {', '.join(bad)}")
    return ImageRecipe(
        role=labels.ROLE_SESSION,
        dockerfile=render_template_text(template, base=base, uid=uid, gid=gid, user=user,
                                        packages=sorted(set(layers.packages)), install=layers.install),
        files=_context_files(extra_cas, tools or {}),
        base_id=base_id,
    )


def bootstrap_base_tag(suite: str) -> str:
    return f"{BOOTSTRAP_BASE}:{suite}-minbase"
