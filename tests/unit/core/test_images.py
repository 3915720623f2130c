from dejima.adapters import packaged
from dejima.core.images import ImageRecipe, build_filter_recipe, build_session_recipe


def filter_recipe(base_id: str = "sha256:1", extra_cas: dict[str, bytes] | None = None,
                  sources: dict[str, bytes] | None = None) -> ImageRecipe:
    return build_filter_recipe(template=packaged.docker_template("filter"), base="debian:bookworm-slim",
                               base_id=base_id, extra_cas={} if extra_cas is None else extra_cas,
                               sources=packaged.filter_sources() if sources is None else sources)


def test_same_inputs_same_hash() -> None:
    assert filter_recipe().content_hash == filter_recipe().content_hash
    assert filter_recipe().tag.startswith("dejima/filter:")


def test_hash_changes_with_each_input() -> None:
    reference = filter_recipe().content_hash
    assert filter_recipe(base_id="sha256:2").content_hash != reference
    assert filter_recipe(extra_cas={"corp.crt": b"cert"}).content_hash != reference
    sources = dict(packaged.filter_sources())
    sources["dejima/filter/nft.py"] += b"\n# changed\n"
    assert filter_recipe(sources=sources).content_hash != reference


def test_extra_cas_are_in_the_build_context_and_trusted_by_the_dockerfile() -> None:
    recipe = filter_recipe(extra_cas={"corp.crt": b"PEM"})
    assert ("extra-ca/corp.crt", b"PEM") in recipe.files
    assert "COPY extra-ca/ /usr/local/share/ca-certificates/" in recipe.dockerfile
    assert "update-ca-certificates" in recipe.dockerfile


def test_session_recipe_names_the_users_uid() -> None:
    recipe = build_session_recipe(packaged.docker_template("session"), "b", "sha256:1", {}, 1234, 99, "alice")
    assert "--uid 1234 --gid 99" in recipe.dockerfile
    other = build_session_recipe(packaged.docker_template("session"), "b", "sha256:1", {}, 1235, 99, "alice")
    assert other.tag != recipe.tag


def test_filter_context_carries_the_filter_and_the_pod_proxy_only() -> None:
    paths = [path for path, _ in filter_recipe().files]
    assert "dejima/filter/__main__.py" in paths and "dejima/filter/nft.py" in paths
    assert "dejima/core/egress.py" in paths  # the same policy code as the launcher's
    assert "dejima/proxy/pod.py" in paths  # a pod's proxy container runs from this image
    assert not any(p.startswith(("dejima/cli/", "dejima/ui/", "dejima/orchestration/")) for p in paths)


def test_session_context_carries_the_notice_and_dejima_why_and_the_tag_follows_them() -> None:
    """What an agent reads in the session (the notice, dejima-why) is in the image, named by its environment,
    and a change to either gives another tag (so the image is rebuilt)."""
    tools = packaged.session_tools()
    recipe = build_session_recipe(packaged.docker_template("session"), "b", "sha256:1", {}, 1234, 99, "alice",
                                  tools=tools)
    files = dict(recipe.files)
    assert files["dejima-why"].startswith(b"#!/usr/bin/python3 -I\n") and b"dejima-allow" in files["notice"]
    assert "COPY dejima-why /usr/local/bin/dejima-why" in recipe.dockerfile
    assert "ENV DEJIMA_NOTICE=/etc/dejima/notice" in recipe.dockerfile
    for name in tools:
        changed = build_session_recipe(packaged.docker_template("session"), "b", "sha256:1", {}, 1234, 99, "alice",
                                       tools={**tools, name: tools[name] + b"\n"})
        assert changed.tag != recipe.tag, name
