"""Pinned archives (npm's and yarn's tarballs, cargo's crates) are inflated by ISA-L (pinned_archives.
inflated): its answers are zlib's on every stream zlib writes, the reader's manifests are what Python's
tarfile (zlib inside) reads from real archives, and a stream that cannot be inflated, or is cut
short, leaves its package unverified with the same reason whichever reader asked, never partly
verified."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import tarfile
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dejima.adapters import cargo_cache, npm_cache, yarn_cache
from dejima.adapters.pinned_archives import inflated, tar_entries
from dejima.core.audit.cargo_verify import crate_key
from dejima.core.audit.model import Artifact
from dejima.core.audit.yarn_verify import yarn_key

STRATEGIES = (zlib.Z_DEFAULT_STRATEGY, zlib.Z_FILTERED, zlib.Z_HUFFMAN_ONLY, zlib.Z_RLE, zlib.Z_FIXED)


@settings(max_examples=200, deadline=None)
@given(chunks=st.lists(st.one_of(st.binary(max_size=4096), st.builds(lambda b, n: b * n, st.binary(min_size=1,
       max_size=40), st.integers(1, 3000))), max_size=12), level=st.integers(0, 9),
       strategy=st.sampled_from(STRATEGIES), wbits=st.sampled_from([31, 15]))
def test_isal_inflates_every_stream_zlib_writes_to_what_zlib_reads(chunks: list[bytes], level: int, strategy: int,
                                                                    wbits: int) -> None:
    """gzip and zlib headers, every level and strategy (stored, fixed and dynamic blocks), random and
    repetitive content (long matches, distances across the window)."""
    content = b"".join(chunks)
    deflater = zlib.compressobj(level, zlib.DEFLATED, wbits, 9, strategy)
    stream = deflater.compress(content) + deflater.flush()
    assert inflated(stream) == zlib.decompress(stream, 47) == content


def reference(data: bytes) -> dict[str, str]:
    """What Python's tarfile (zlib inside) reads: each regular entry's SHA-256, its first component
    stripped."""
    files = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            if member.isfile():
                extracted = archive.extractfile(member)
                assert extracted is not None
                files[member.name.partition("/")[2]] = hashlib.sha256(extracted.read()).hexdigest()
    return files


def packed(files: dict[str, bytes], level: int = 9, form: int = tarfile.PAX_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", compresslevel=level, mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w", format=form) as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def sample(count: int = 60) -> dict[str, bytes]:
    """Source-like and incompressible files, one of 3 MiB (many deflate blocks, a large window)."""
    files = {f"package/lib/m{i}.js": (f"export const v{i} = {i};\n" * (i * 37 + 1)).encode() for i in range(count)}
    files["package/blob.bin"] = os.urandom(200_000)
    files["package/" + "d" * 120 + "/long.js"] = b"long\n"
    files["package/big.txt"] = b"".join(b"line %d of a large text file\n" % i for i in range(100_000))
    return files


@pytest.mark.parametrize("level", [1, 6, 9])
@pytest.mark.parametrize("form", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_the_readers_manifest_is_what_tarfile_reads(level: int, form: int) -> None:
    files = sample()
    if form == tarfile.USTAR_FORMAT:
        files = {name: data for name, data in files.items() if len(name) <= 100}
    data = packed(files, level, form)
    assert tar_entries(data) == reference(data)
    assert len(reference(data)) == len(files)


NPM = shutil.which("npm")


@pytest.mark.skipif(NPM is None, reason="needs npm")
def test_a_tarball_npm_packs_is_read_as_tarfile_reads_it(tmp_path: Path) -> None:
    source = tmp_path / "pkg"
    (source / "lib").mkdir(parents=True)
    (source / "package.json").write_text('{"name": "inflated", "version": "1.0.0", "main": "index.js"}')
    (source / "index.js").write_text("module.exports = require('./lib/a');\n" * 500)
    (source / "lib/a.js").write_bytes(os.urandom(50_000))
    subprocess.run(["npm", "pack", "--silent"], cwd=source, check=True, capture_output=True, timeout=120,
                   env={**os.environ, "npm_config_cache": str(tmp_path / "cache"), "npm_config_offline": "true",
                        "npm_config_update_notifier": "false"})
    data = (source / "inflated-1.0.0.tgz").read_bytes()
    assert tar_entries(data) == reference(data)
    assert set(tar_entries(data)) == {"package.json", "index.js", "lib/a.js"}


def damaged() -> dict[str, bytes]:
    """A real archive damaged three ways: a byte of its deflate stream changed, its CRC changed, and
    cut before its trailer (every byte of the tar is there, unchecked)."""
    data = packed({"package/index.js": b"module.exports = 1;\n" * 2000, "package/blob.bin": os.urandom(20_000)})
    middle = len(data) // 2
    return {"a deflate byte changed": data[:middle] + bytes([data[middle] ^ 0x55]) + data[middle + 1:],
            "its CRC changed": data[:-8] + bytes([data[-8] ^ 1]) + data[-7:],
            "cut before its trailer": data[:-8]}


WHY = {"a deflate byte changed": "its gzip stream cannot be inflated",
       "its CRC changed": "its gzip stream cannot be inflated",
       "cut before its trailer": "its gzip stream is cut short"}


def npm_reader(root: Path, data: bytes) -> str | Artifact:
    digest = hashlib.sha512(data).digest()
    hexdigest = digest.hex()
    entry = root / f".npm/_cacache/content-v2/sha512/{hexdigest[:2]}/{hexdigest[2:4]}/{hexdigest[4:]}"
    entry.parent.mkdir(parents=True)
    entry.write_bytes(data)
    return npm_cache.tarball([root / ".npm"], "sha512-" + base64.b64encode(digest).decode())


def cargo_reader(root: Path, data: bytes) -> str | Artifact:
    crate = root / ".cargo/registry/cache/index.crates.io-0000/tiny-0.1.0.crate"
    crate.parent.mkdir(parents=True)
    crate.write_bytes(data)
    key = crate_key("tiny", "0.1.0", hashlib.sha256(data).hexdigest())
    return cargo_cache.crates([root / ".cargo"])([key])[key]


def yarn_reader(root: Path, data: bytes) -> str | Artifact:
    tarball = root / "yarn/v6/npm-tiny-1.0.0-abc123-integrity/node_modules/tiny/.yarn-tarball.tgz"
    tarball.parent.mkdir(parents=True)
    tarball.write_bytes(data)
    key = yarn_key("tiny", "https://registry.example/tiny-1.0.0.tgz#abc123",
                   "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode())
    return yarn_cache.tarballs([root / "yarn"], [])([key])[key]


READERS: dict[str, Callable[[Path, bytes], str | Artifact]] = {"npm": npm_reader, "cargo": cargo_reader,
                                                                "yarn": yarn_reader}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("damage", WHY)
def test_a_damaged_archive_that_hashes_to_its_pin_leaves_its_package_unverified_saying_why(
        tmp_path: Path, reader: str, damage: str) -> None:
    """The pin names the damaged bytes (they hash to it): no manifest, partial or whole, is had from
    them, and the reason is the same whichever tool's reader asked."""
    answer = READERS[reader](tmp_path, damaged()[damage])
    assert isinstance(answer, str)
    assert "cannot be read (ValueError: " + WHY[damage] in answer


def test_the_intact_archive_the_damage_was_done_to_is_verified(tmp_path: Path) -> None:
    """Control: the same archive, undamaged, through the same readers."""
    data = packed({"package/index.js": b"module.exports = 1;\n" * 2000, "package/blob.bin": os.urandom(20_000)})
    for name, reader in READERS.items():
        answer = reader(tmp_path / name, data)
        assert isinstance(answer, Artifact) and answer.files == reference(data)


def test_a_gzip_bomb_stops_at_the_unpacked_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from dejima.adapters import pinned_archives

    monkeypatch.setattr(pinned_archives, "UNPACKED_LIMIT", 1 << 20)
    with pytest.raises(ValueError, match="MiB unpacked"):
        inflated(gzip.compress(bytes(8 << 20)))
