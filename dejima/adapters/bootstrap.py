"""Makes a Debian base image without a registry: debootstrap a minbase, then ``docker import``.

Used when the configured base image cannot be pulled (air-gapped machines, no registry).
Needs root and the debootstrap program; says what is missing otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from dejima.adapters.runtime import Runtime
from dejima.core import labels
from dejima.errors import ImageError


def bootstrap_base(
    runtime: Runtime, tag: str, suite: str, mirror: str, on_line: Callable[[str], None],
    workdir: Path | None = None,
) -> str:
    if os.geteuid() != 0:
        raise ImageError(
            "making a Debian base image with debootstrap needs root",
            hint="run `sudo dejima images bootstrap` once, or make a base image available: "
            "`docker pull` it, or set [images] base in the settings to one you have",
        )
    debootstrap = shutil.which("debootstrap")
    if debootstrap is None:
        raise ImageError(
            "the debootstrap program is not installed",
            hint="install it (`apt-get install debootstrap`), or make the base image available",
        )
    with tempfile.TemporaryDirectory(prefix="dejima-bootstrap-", dir=workdir) as tmp:
        rootfs = Path(tmp) / "rootfs"
        command = [debootstrap, "--variant=minbase", suite, str(rootfs), mirror]
        tail: list[str] = []
        with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as process:
            assert process.stdout is not None
            for line in process.stdout:
                tail = (tail + [line.rstrip()])[-20:]
                on_line(line.rstrip())
        if process.returncode != 0:
            raise ImageError(
                f"debootstrap {suite} from {mirror} failed (exit {process.returncode})",
                context="\n".join(tail),
                hint="check that the mirror is reachable, or set [images] bootstrap_mirror",
            )
        # The apt caches debootstrap leaves behind only make the image bigger.
        shutil.rmtree(rootfs / "var/cache/apt/archives", ignore_errors=True)
        (rootfs / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
        on_line(f"importing {rootfs} as {tag}")
        tar = subprocess.Popen(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-c", "."],
            stdout=subprocess.PIPE,
        )
        assert tar.stdout is not None
        try:
            image = runtime.import_rootfs(
                tar.stdout, tag, {labels.ROLE: labels.ROLE_BASE, "dejima.adapters.bootstrap-mirror": mirror}
            )
        finally:
            if tar.stdout:
                tar.stdout.close()
            tar.wait()
        if tar.returncode != 0:
            raise ImageError(f"packing the bootstrapped root filesystem failed (tar exit {tar.returncode})")
        return image
