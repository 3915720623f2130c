"""What a request on a forge route asks the forge to do, read one way only: the path rules' input.

A forge decodes a request's path before it routes it (CGI's ``PATH_INFO`` is decoded; so are the
routers of the big forges), folds duplicate slashes and dot segments, and may ignore case. A rule
that matched the path as sent could be walked around with ``git%2Dreceive%2Dpack`` or
``/x/../git-receive-pack``. So a git route's request target is first made **canonical**:

- every ``%XX`` is decoded; what it decodes to, like every literal character, must be one of
  ``A-Z a-z 0-9 - . _ ~`` (or ``/`` unencoded, between segments). An encoded ``/`` or ``\\``, a
  ``%25`` (an encoding of an encoding), a ``;``, a control or non-ASCII character: the forge could
  read them another way, so the request is refused, not guessed at;
- empty segments (``//``) and ``.`` are dropped, ``..`` takes the segment before it back (and is
  refused where there is none: it would climb out of the route's root), a trailing ``/`` goes;
- query parameters are decoded the same way; one that appears twice (names compared ignoring
  case) is refused, since forges differ on which one they read.

The canonical target is what the proxy forwards, so the forge acts on exactly what was judged. It
is then classified ignoring case: ``<repo>/git-receive-pack`` is a push, ``<repo>/info/refs`` with
``service=git-receive-pack`` its ref advertisement; anything after a ``git-receive-pack`` segment
is refused. Only GET, HEAD, POST and OPTIONS go through a git route, and PUT under ``info/lfs/``
(git-lfs uploads): WebDAV's methods write refs on a dumb-HTTP server, where no push rule looks.

Every other route gets one check (``mentions_push``): a target that, decoded as often as it
holds an encoding, names ``git-receive-pack`` is refused there; pushes go through the git route.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from urllib.parse import unquote

_SAFE = frozenset(string.ascii_letters + string.digits + "-._~")
_SHOWN = {"/": "slash", "\\": "backslash", "%": "percent sign", ";": "semicolon", "?": "question mark",
          "#": "hash", "&": "ampersand", "=": "equals sign", "+": "plus sign"}
PUSH_SERVICE = "git-receive-pack"
GIT_METHODS = frozenset({"GET", "HEAD", "POST", "OPTIONS"})
_LFS = ("info", "lfs")


class Unjudgeable(ValueError):
    """A request on a git route that the proxy cannot read one way only; it is refused, never forwarded."""


@dataclass(frozen=True, slots=True)
class GitTarget:
    """A git route's request, canonical: ``tail`` is what goes upstream (after the route's base path)."""

    tail: str  # "/owner/repo.git/git-receive-pack", "/owner/repo.git/info/refs?service=git-upload-pack"
    kind: str | None  # "push", "advertise" (the receive-pack ref advertisement) or None (fetches, LFS...)
    repository: str  # the path before the git service ("owner/repo.git"); "" for other requests


def _character(text: str, index: int) -> tuple[str, int]:
    """The character at ``index`` after decoding one ``%XX``; refuses what a forge could read otherwise."""
    char = text[index]
    if char == "%":
        digits = text[index + 1:index + 3]
        if len(digits) != 2 or any(d not in string.hexdigits for d in digits):
            raise Unjudgeable("a malformed percent-encoding")
        decoded = chr(int(digits, 16))
        if decoded not in _SAFE:
            raise Unjudgeable(f"an encoded {_name(decoded)} (%{digits.upper()}), which a forge may read another way")
        return decoded, index + 3
    if char not in _SAFE:
        raise Unjudgeable(f"a {_name(char)} in the path or query, which a forge may read another way")
    return char, index + 1


def _name(char: str) -> str:
    return _SHOWN.get(char) or (f"character {char!r}" if char.isprintable() and char.isascii()
                                else f"character U+{ord(char):04X}")


def _decoded(text: str) -> str:
    out, index = [], 0
    while index < len(text):
        char, index = _character(text, index)
        out.append(char)
    return "".join(out)


def canonical_segments(path: str) -> list[str]:
    """The path's segments, decoded, without empty or dot segments; raises Unjudgeable."""
    segments: list[str] = []
    for raw in path.split("/"):
        segment = _decoded(raw)
        if segment in ("", "."):
            continue
        if segment == "..":
            if not segments:
                raise Unjudgeable("a '..' segment that climbs out of the route's root")
            segments.pop()
            continue
        segments.append(segment)
    return segments


def canonical_query(query: str) -> list[tuple[str, str]]:
    """The query's parameters, decoded, each name once; raises Unjudgeable."""
    parameters: list[tuple[str, str]] = []
    seen: set[str] = set()
    for piece in query.split("&"):
        name, equals, value = piece.partition("=")
        name = _decoded(name)
        if not name:
            raise Unjudgeable("an empty query parameter")
        if name.lower() in seen:
            raise Unjudgeable(f"the query parameter {name!r} appears more than once, and forges differ on which "
                              "one they read")
        seen.add(name.lower())
        parameters.append((name, _decoded(value) if equals else ""))
    return parameters


def judge_git_target(method: str, tail: str) -> GitTarget:
    """A git route's request (``tail``: what followed ``/r/<route>``), canonical and classified.

    Raises Unjudgeable with the reason when the request cannot be read one way only."""
    path, question, query = tail.partition("?")
    segments = canonical_segments(path)
    parameters = canonical_query(query) if question else []
    lowered = [segment.lower() for segment in segments]
    if method not in GIT_METHODS and not (method == "PUT" and _is_lfs(lowered)):
        raise Unjudgeable(f"the method {method} goes through a git route only for git-lfs uploads (PUT under "
                          "info/lfs/); WebDAV's methods would write refs where no push rule looks")
    canonical = "/" + "/".join(segments)
    if parameters:
        canonical += "?" + "&".join(f"{name}={value}" for name, value in parameters)
    kind: str | None = None
    repository = ""
    if PUSH_SERVICE in lowered:
        at = lowered.index(PUSH_SERVICE)
        if at != len(lowered) - 1:
            raise Unjudgeable(f"a path that goes on after {PUSH_SERVICE}")
        kind, repository = "push", "/".join(segments[:at])
    elif lowered[-2:] == ["info", "refs"] and any(
            name.lower() == "service" and value.lower() == PUSH_SERVICE for name, value in parameters):
        kind, repository = "advertise", "/".join(segments[:-2])
    return GitTarget(canonical, kind, repository)


def _is_lfs(lowered: list[str]) -> bool:
    return any(tuple(lowered[i:i + 2]) == _LFS for i in range(len(lowered) - 1))


def mentions_push(target: str) -> bool:
    """Whether a target names git's push service in any spelling a server could decode it to
    (percent-encodings undone as often as they nest, backslashes read as slashes, any case)."""
    text = target
    for _ in range(8):  # each round undoes one level of encoding; a target is at most 64 KiB
        decoded = unquote(text, errors="replace")
        if decoded == text:
            return PUSH_SERVICE in text.replace("\\", "/").lower()
        text = decoded
    return True  # encodings nested deeper than any server decodes: no honest client sends that
