"""wheel_cache.py's readers held to the long way: an unpacked archive (uv's cache) reads as the wheel
it was unpacked from does, every entry, whatever the depth, links never followed."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

from dejima.adapters.wheel_cache import _directory_entries, wheel_entries
from tests.wheels import wheel

FILES = {
    "deep/__init__.py": b"A = 1\n",
    "deep/a/b/c/d/module.py": b"B = 2\n",
    "deep/a/b/data.bin": bytes(range(256)),
    "deep-1.0.dist-info/entry_points.txt": b"[console_scripts]\ndeep = deep:main\n",
    "deep-1.0.data/scripts/deepsh": b"#!python\nprint('sh')\n",
}


def test_an_unpacked_archive_reads_as_its_wheel_with_what_its_record_leaves_out_hashed(tmp_path: Path) -> None:
    built = wheel(tmp_path, "deep", "1.0", FILES)
    top = tmp_path / "archive"
    with zipfile.ZipFile(built) as archive:
        archive.extractall(top)
    (top / "deep/a/unlisted.py").write_bytes(b"C = 3\n")  # in no RECORD: hashed, as the wheel reader hashes one
    os.symlink("../__init__.py", top / "deep/a/link.py")  # links: skipped, never followed
    (top / "deep/a/b/data.bin").unlink()  # one RECORD lists, now a link: no entry
    os.symlink("../../__init__.py", top / "deep/a/b/data.bin")
    os.symlink(str(tmp_path), top / "deep/a/outside")
    os.mkfifo(top / "deep/a/fifo")

    read = _directory_entries(top)
    expected = wheel_entries(built.read_bytes())
    assert read is not None
    del expected.files["deep/a/b/data.bin"]
    assert read.files == {**expected.files, "deep/a/unlisted.py": hashlib.sha256(b"C = 3\n").hexdigest()}
    assert read.texts == expected.texts and "deep-1.0.data/scripts/deepsh" in (read.texts or {})
    # The long way: every regular file below the archive read and hashed (RECORD is honest here).
    walked = {}
    for directory, _, names in os.walk(top):
        for name in names:
            path = Path(directory, name)
            if path.is_file() and not path.is_symlink():
                walked[path.relative_to(top).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    assert {k: v for k, v in read.files.items() if not k.endswith("/RECORD")} == \
        {k: v for k, v in walked.items() if not k.endswith("/RECORD")}
    assert _directory_entries(top / "deep/__init__.py") is None  # not a directory
