"""Images are cached by content hash, rebuilt when inputs change, and trust the host's extra CAs."""

from __future__ import annotations

import io
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from dejima.adapters.host import identity
from dejima.adapters.image_builds import ensure_image, recipes, resolve_base
from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.core.settings import ImageSettings, Settings
from dejima.errors import ImageError
from dejima.ui.console import UI, plain_console
from tests.conftest import TEST_SCOPE
from tests.integration.conftest import Images
from tests.world import docker


def quiet_ui() -> tuple[UI, io.StringIO]:
    buffer = io.StringIO()
    return UI(plain_console(buffer)), buffer


def test_present_images_are_not_rebuilt(runtime: Runtime, images: Images) -> None:
    ui, output = quiet_ui()
    base = resolve_base(runtime, Settings(), ui)
    for recipe in recipes(base, Settings(), identity()):
        assert ensure_image(runtime, recipe, ui) == recipe.tag
    assert "Building" not in output.getvalue()


def test_unpullable_base_without_fallback_is_a_clear_error(runtime: Runtime) -> None:
    settings = Settings(images=ImageSettings(base="dejima-test.invalid/no-such-base:1", base_fallback="none"))
    with pytest.raises(ImageError) as caught:
        resolve_base(runtime, settings, quiet_ui()[0])
    assert caught.value.message.startswith("base image dejima-test.invalid/no-such-base:1 cannot be pulled")
    assert 'base_fallback = "debootstrap"' in (caught.value.hint or "")


@pytest.fixture
def extra_ca(tmp_path: Path) -> Path:
    directory = tmp_path / "extra-ca"
    directory.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=dejima test corp CA",
         "-keyout", str(tmp_path / "key.pem"), "-out", str(directory / "dejima-test-corp.crt")],
        check=True, capture_output=True,
    )
    return directory


def test_builds_trust_the_hosts_extra_cas(runtime: Runtime, images: Images, extra_ca: Path) -> None:
    settings = Settings(images=replace(ImageSettings(), extra_ca_dir=str(extra_ca)))
    ui, output = quiet_ui()
    base = resolve_base(runtime, settings, ui)
    _, session_recipe = recipes(base, settings, identity())
    default_session = recipes(base, Settings(), identity())[1]
    assert session_recipe.tag != default_session.tag  # a new CA is a new input: a new image
    tag = ensure_image(runtime, session_recipe, ui)
    try:
        assert "Building the session image" in output.getvalue()
        bundle = docker("run", "--rm", "--label", f"{labels.SCOPE}={TEST_SCOPE}", "--label",
                        f"{labels.ROLE}=test-ca-check", tag, "cat", "/etc/ssl/certs/ca-certificates.crt").stdout
        certificate = (extra_ca / "dejima-test-corp.crt").read_text().strip()
        assert certificate in bundle.decode()
    finally:
        runtime.remove_image(tag)


def test_prune_removes_outdated_images_and_keeps_current_ones(runtime: Runtime, images: Images) -> None:
    current = images.filter
    outdated = "dejima/filter:0000outdated0000"
    assert docker("tag", current, outdated).returncode == 0
    from dejima.adapters.image_builds import prune_images

    others = frozenset({images.session, images.session_root})
    prune_images(runtime, Settings(), identity(), quiet_ui()[0], keep=others)
    assert runtime.image_id(outdated) is None
    assert runtime.image_id(current) is not None


def test_a_root_file_system_streamed_from_tar_becomes_an_image(runtime: Runtime, tmp_path: Path) -> None:
    """The bootstrap's import (dejima.adapters.bootstrap) through the engine client: a tar read from a pipe as
    tar writes it, larger than one chunk, with the labels and command it asks for."""
    root = tmp_path / "rootfs"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text("ID=dejima-test\n")
    (root / "blob").write_bytes(bytes(range(256)) * 4096)  # 1 MiB: several chunks of the upload
    tag = "dejima-test/imported:1"
    tar = subprocess.Popen(["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    try:
        image = runtime.import_rootfs(tar.stdout, tag, {labels.SCOPE: TEST_SCOPE, labels.ROLE: "test-import"})
    finally:
        tar.stdout.close()
        tar.wait()
    try:
        info = runtime.engine.call("GET", f"/images/{tag}/json")
        assert info["Id"] == image and info["Config"]["Labels"][labels.ROLE] == "test-import"
        assert info["Config"]["Cmd"] == ["/bin/bash"] and info["Size"] >= 1024 * 1024
    finally:
        runtime.remove_image(tag)
