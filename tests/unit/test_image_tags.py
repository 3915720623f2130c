"""Remembered image tags: a recipe's tag is reused only for exactly the inputs that made it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dejima.adapters.image_builds import Base, TagCache, recipe_inputs_key, recipes
from dejima.core.images import ImageLayers
from dejima.core.plan import Identity
from dejima.core.settings import Settings

BASE = Base("dejima/base:bookworm-minbase", "sha256:" + "1" * 64, bootstrapped=True)
ME = Identity(1000, 1000, "dev")


def test_the_key_changes_with_every_input_that_changes_a_recipe(tmp_path: Path) -> None:
    settings = Settings()
    key = recipe_inputs_key(BASE, settings, ME)
    assert recipe_inputs_key(BASE, settings, ME) == key
    other_base = Base(BASE.ref, "sha256:" + "2" * 64, bootstrapped=True)
    cas = tmp_path / "cas"
    cas.mkdir()
    (cas / "corp.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    with_ca = replace(settings, images=replace(settings.images, extra_ca_dir=str(cas)))
    (tmp_path / "proxy-ca.pem").write_bytes(b"-----BEGIN CERTIFICATE-----\nUFJPWFk=\n-----END CERTIFICATE-----\n")
    with_proxy_ca = replace(settings, network=replace(settings.network, extra_ca=str(tmp_path / "proxy-ca.pem")))
    changed = [
        recipe_inputs_key(other_base, settings, ME),
        recipe_inputs_key(BASE, settings, Identity(1001, 1000, "dev")),
        recipe_inputs_key(BASE, settings, Identity(1000, 1000, "other")),
        recipe_inputs_key(BASE, settings, ME, ImageLayers(packages=("jq",))),
        recipe_inputs_key(BASE, with_ca, ME),
        recipe_inputs_key(BASE, with_proxy_ca, ME),
    ]
    assert len({key, *changed}) == 1 + len(changed)
    # Control: the recipes themselves differ for each of those inputs, so the key must too.
    tags = {tuple(r.tag for r in recipes(BASE, settings, ME))}
    tags.add(tuple(r.tag for r in recipes(BASE, with_ca, ME)))
    tags.add(tuple(r.tag for r in recipes(BASE, with_proxy_ca, ME)))
    assert len(tags) == 3
    # [network] extra_ca reaches both images' build context, where update-ca-certificates reads it.
    for recipe in recipes(BASE, with_proxy_ca, ME):
        assert b"UFJPWFk=" in dict(recipe.files)["extra-ca/dejima-network-extra-ca-0.crt"]


def test_the_cache_remembers_a_bounded_number_and_survives_a_broken_file(tmp_path: Path) -> None:
    cache = TagCache(tmp_path / "state" / "image-tags.json")
    assert cache.get("k") is None  # no file yet
    for n in range(TagCache.KEEP + 5):
        cache.put(f"k{n}", (f"dejima/filter:{n}", f"dejima/session:{n}"))
    assert cache.get("k0") is None and cache.get(f"k{TagCache.KEEP + 4}") == (
        f"dejima/filter:{TagCache.KEEP + 4}", f"dejima/session:{TagCache.KEEP + 4}")
    cache.path.write_text("{not json")
    assert cache.get("k1") is None
    cache.path.write_text('{"k": ["only one"]}')
    assert cache.get("k") is None
