"""A pinned archive's tar headers read in C (dejima/adapters/_tar_headers.c) answer what the same
reading in Python answers (pinned_archives._headers_in_python, used where the C part was not built):
on archives Python's tarfile writes in its three formats, names that unpacking must clean up, and the
same archives damaged byte by byte, the same headers or the same error. And the manifest made with
either is the same."""

from __future__ import annotations

import io
import tarfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dejima.adapters import pinned_archives
from dejima.adapters._tar_headers import headers  # not built: this module fails to load, red
from dejima.adapters.pinned_archives import ENTRY_LIMIT, _headers_in_python


def test_the_manifests_read_headers_in_c_where_it_is_built() -> None:
    assert pinned_archives._headers is headers


NAMES = st.one_of(
    st.sampled_from(["package/index.js", "package/./a.js", "package//b.js", "package/lib/", "package/../up.js",
                     "/package/abs.js", "package/.hidden", "package/a/../../x", "package/.", "package",
                     "package/" + "d" * 140 + "/long.js", "package/é/ü.js", "package/lib/.bin/tool"]),
    st.text(st.characters(min_codepoint=32, max_codepoint=0x2FF, blacklist_characters="\0"), min_size=1,
            max_size=160))
KINDS = st.sampled_from([tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.CONTTYPE])


def archive(entries: list[tuple[str, bytes, bytes]], form: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=form, encoding="utf-8", errors="surrogateescape") as tar:
        for name, kind, data in entries:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind in (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE):
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            else:
                info.linkname = "index.js" if kind == tarfile.SYMTYPE else ""
                tar.addfile(info)
    return buffer.getvalue()


def answer(read: object, raw: bytes, limit: int = ENTRY_LIMIT) -> object:
    try:
        return read(raw, limit)  # type: ignore[operator]
    except ValueError as error:
        return ("ValueError", str(error))


ENTRIES = st.lists(st.tuples(NAMES, KINDS, st.binary(max_size=1500)), max_size=8)


@settings(max_examples=300, deadline=None)
@given(entries=ENTRIES, form=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]))
def test_c_and_python_read_the_same_headers_of_archives_tarfile_writes(entries: list[tuple[str, bytes, bytes]],
                                                                      form: int) -> None:
    try:
        raw = archive(entries, form)
    except ValueError:
        return  # a name this format cannot hold (ustar: too long)
    assert answer(headers, raw) == answer(_headers_in_python, raw)
    assert answer(headers, raw, 1) == answer(_headers_in_python, raw, 1)


@settings(max_examples=500, deadline=None)
@given(entries=ENTRIES, form=st.sampled_from([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT]),
       damage=st.lists(st.tuples(st.integers(0, 4096), st.integers(0, 255)), min_size=1, max_size=6),
       cut=st.one_of(st.none(), st.integers(0, 5000)))
def test_c_and_python_answer_the_same_on_damaged_headers(entries: list[tuple[str, bytes, bytes]], form: int,
                                                         damage: list[tuple[int, int]], cut: int | None) -> None:
    """Bytes changed anywhere in the first blocks (checksums, sizes in octal or base-256, names,
    prefixes, type bytes), the archive cut anywhere: the same headers or the same error."""
    try:
        raw = bytearray(archive(entries, form))
    except ValueError:
        return
    for offset, value in damage:
        if offset < len(raw):
            raw[offset] = value
            if 124 <= offset % 512 < 136 or 148 <= offset % 512 < 156:  # a number, checksum kept right
                block = offset - offset % 512
                header = raw[block:block + 512]
                total = sum(header[:148]) + 8 * 32 + sum(header[156:])
                raw[block + 148:block + 156] = b"%06o\0 " % total if total < 8 ** 6 else raw[block + 148:block + 156]
    damaged = bytes(raw[:cut] if cut is not None else raw)
    assert answer(headers, damaged) == answer(_headers_in_python, damaged)


def header(name: bytes = b"package/a.js", size: bytes = b"%011o\0" % 5, checksum: bytes | None = None,
           kind: bytes = b"0", prefix: bytes = b"") -> bytes:
    block = bytearray(512)
    block[:len(name)] = name
    block[124:136] = size
    block[156:157] = kind
    block[257:263] = b"ustar\0"
    block[345:345 + len(prefix)] = prefix
    block[148:156] = b" " * 8
    block[148:156] = checksum if checksum is not None else b"%06o\0 " % sum(block)
    return bytes(block)


CASES = {
    "a base-256 size": header(size=b"\x80" + bytes(7) + (5).to_bytes(4, "big")),
    "a base-256 size past any archive": header(size=b"\xff" * 12),
    "an octal size with a sign": header(size=b"+0000000005\0"),
    "an octal size with 0o": header(size=b"0o000000005\0"),
    "an octal size with an underscore": header(size=b"0000_000005\0"),
    "an octal size in spaces": header(size=b"   5 \0      "),
    "an empty size": header(size=bytes(12)),
    "a checksum with 0o": header(checksum=b"0o1234\0 "),
    "an empty checksum": header(checksum=b"  \0     "),
    "a checksum too large": header(checksum=b"77777777"),
    "a signed checksum": None,
    "a ustar prefix": header(prefix=b"package/deep"),
    "a name of 100 bytes": header(name=b"p" * 100),
}


def signed() -> bytes:
    block = bytearray(header(name="package/é.js".encode()))
    block[148:156] = b" " * 8
    total = sum(block) - 256 * sum(1 for byte in block if byte > 127)
    block[148:156] = b"%06o\0 " % total
    return bytes(block)


@pytest.mark.parametrize("case", CASES)
def test_c_and_python_answer_the_same_on_fields_at_their_edges(case: str) -> None:
    """Fields Python's int() would take and the C part would not (a sign, 0o, underscores): both
    refuse them, so the two readers never differ; a base-256 size, spaces, a signed checksum: both take them."""
    block = CASES[case] if CASES[case] is not None else signed()
    assert block is not None
    content = b"" if case == "an empty size" else b"hello".ljust(512, b"\0")  # else read as the next header
    raw = block + content + bytes(1024)
    got = answer(headers, raw)
    assert got == answer(_headers_in_python, raw)
    taken = ("a base-256 size", "an octal size in spaces", "an empty size", "a signed checksum", "a ustar prefix",
             "a name of 100 bytes")
    assert isinstance(got, list) == (case in taken), got


def test_the_manifest_is_the_same_whichever_reads_the_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    files = [("package/index.js", tarfile.REGTYPE, b"module.exports = 1;\n"), ("package/./lib//a.js", tarfile.REGTYPE,
             b"a"), ("package/../out.js", tarfile.REGTYPE, b"o"), ("package/" + "d" * 120 + "/x.js", tarfile.REGTYPE,
             b"x"), ("package/lib/", tarfile.DIRTYPE, b""), ("package/.bin/t", tarfile.REGTYPE, b"t")]
    data = gzip.compress(archive(files, tarfile.PAX_FORMAT))
    in_c = pinned_archives.tar_entries(data)
    monkeypatch.setattr(pinned_archives, "_headers", _headers_in_python)
    assert pinned_archives.tar_entries(data) == in_c
    assert set(in_c) == {"index.js", "lib/a.js", "d" * 120 + "/x.js", ".bin/t"}
