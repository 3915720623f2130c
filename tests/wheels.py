"""Small wheels built by hand for the audit's tests (no build backend, no network), as pip and uv
install them."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


TINY = {"tiny/__init__.py": b"def main():\n    print('tiny')\n"}
TINY_ENTRY_POINTS = b"[console_scripts]\ntiny = tiny:main\n"


def wheel(directory: Path, name: str = "tiny", version: str = "0.1", files: dict[str, bytes] | None = None) -> Path:
    """A small wheel built by hand (no build backend, no network): by default a module and a
    console script."""
    info = f"{name}-{version}.dist-info"
    files = {**(TINY if files is None else files),
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
             **({f"{info}/entry_points.txt": TINY_ENTRY_POINTS} if files is None else {})}
    record = "".join(f"{path},{record_hash(data)},{len(data)}\n" for path, data in files.items())
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        archive.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return path
