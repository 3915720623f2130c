"""Per-session placeholders and decoys, and the detector that recognises them anywhere.

A *placeholder* stands in the session for a route's real secret; it is shaped like the real key
(right prefix) because some clients check the format, and carries a random core that is unique to
the session. A *decoy* is a fake credential planted in the session (AWS keys in the environment
and in an ``~/.aws/credentials`` file) that no route accepts: any use of one is a signal.

Every random value is drawn from the session's ``Draws``: a seed drawn once before the start is planned
(a fact, like the session's id), from which each value follows by its label. So the plan is a function
of its facts: the same facts, the same placeholders.

``SecretScanner.find`` recognises any of them in bytes (request heads, DNS names — case-insensitive,
since DNS folds case), naming the route or decoy, never printing the value.
"""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_CORE_ALPHABET = string.ascii_lowercase + string.digits  # survives DNS case folding
_CORE_LENGTH = 32

# Prefixes that make a placeholder pass the format checks of the clients that read it, by the
# manifest's (not the override's) upstream host and header.
_SHAPES: tuple[tuple[str, str | None, str], ...] = (
    ("api.anthropic.com", "authorization", "sk-ant-oat01-"),  # a Claude login (OAuth) token
    ("api.anthropic.com", None, "sk-ant-api03-"),
    ("api.openai.com", None, "sk-proj-"),
    ("openrouter.ai", None, "sk-or-v1-"),
    ("api.github.com", None, "ghp_"),
    ("uploads.github.com", None, "ghp_"),
    ("github.com", None, "ghp_"),
    ("gitlab.com", None, "glpat-"),
)
DEFAULT_PREFIX = "dejima-placeholder-"


@dataclass(frozen=True, slots=True)
class Draws:
    """The session's randomness, drawn before its plan: each value is the seed's keyed hash of its
    label (BLAKE2b, 512 bits), written in the value's alphabet; no value tells another or the seed."""

    seed: bytes = field(repr=False)  # drawn by the launcher (adapters/session_dirs.new_draws), with the session's id

    def core(self, label: str, length: int = _CORE_LENGTH, alphabet: str = _CORE_ALPHABET) -> str:
        number = int.from_bytes(hashlib.blake2b(label.encode(), key=self.seed, digest_size=64).digest(), "big")
        letters = []
        for _ in range(length):  # 512 bits for at most 40 letters of 62 (238 bits): no letter favoured
            number, index = divmod(number, len(alphabet))
            letters.append(alphabet[index])
        return "".join(letters)


def placeholder_prefix(upstream_host: str, header: str) -> str:
    for host, wanted_header, prefix in _SHAPES:
        if host == upstream_host.lower() and wanted_header in (None, header.lower()):
            return prefix
    return DEFAULT_PREFIX


def make_placeholder(upstream_host: str, header: str, draws: Draws, label: str = "") -> str:
    """The placeholder of one route of one session (``label``: what it stands for, e.g. its source)."""
    return placeholder_prefix(upstream_host, header) + draws.core(f"placeholder {label}")


_PLACEHOLDER = re.compile("^(" + "|".join(sorted({re.escape(p) for *_, p in _SHAPES} | {re.escape(DEFAULT_PREFIX)}))
                          + f")[{_CORE_ALPHABET}]{{{_CORE_LENGTH}}}\\Z")


def placeholder_shaped(value: str) -> bool:
    """Whether ``value`` has a route placeholder's shape (a known prefix, then the random core)."""
    return _PLACEHOLDER.match(value) is not None


# What an AWS SDK reads: a session with SigV4 routes gets placeholders in both (and no decoys there).
AWS_PLACEHOLDER_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def make_aws_placeholders(draws: Draws) -> tuple[str, str]:
    """A key id and a secret key for a session's SigV4 routes, shaped like AWS's, random per session.
    The session's SDK signs with them; the proxy drops that signature and signs with the host's keys."""
    return "AKIA" + draws.core("aws key id", 16, _UPPER), draws.core("aws secret key", 40, _MIXED)


@dataclass(frozen=True, slots=True)
class Decoys:
    """Fake credentials for one session: environment variables and an AWS shared-credentials file."""

    env: Mapping[str, str]
    aws_credentials_file: str  # the text of ~/.aws/credentials
    file_values: Mapping[str, str]  # the file's fake values, by a name that says where they are

    def values(self) -> dict[str, str]:
        """Decoy name -> value, for the scanner."""
        return {**self.env, **self.file_values}


DECOY_ENV_NAMES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "NPM_TOKEN", "HF_TOKEN", "STRIPE_API_KEY")
_UPPER = string.ascii_uppercase + string.digits
_MIXED = string.ascii_letters + string.digits


_DECOY_SHAPES = {  # name -> (prefix, length, alphabet)
    "AWS_ACCESS_KEY_ID": ("AKIA", 16, _UPPER),
    "AWS_SECRET_ACCESS_KEY": ("", 40, _MIXED),
    "NPM_TOKEN": ("npm_", 36, _CORE_ALPHABET),
    "HF_TOKEN": ("hf_", 34, _CORE_ALPHABET),
    "STRIPE_API_KEY": ("sk_live_", 32, _CORE_ALPHABET),
}


def _decoy_value(name: str, draws: Draws, where: str) -> str:
    prefix, length, alphabet = _DECOY_SHAPES[name]
    return prefix + draws.core(f"decoy {where} {name}", length, alphabet)


def make_decoys(draws: Draws, taken: Iterable[str] = ()) -> Decoys:
    """Decoys for every name in DECOY_ENV_NAMES that no route uses (``taken``: the placeholder variables)."""
    skip = set(taken)
    env = {name: _decoy_value(name, draws, "env") for name in DECOY_ENV_NAMES if name not in skip}
    key_id = _decoy_value("AWS_ACCESS_KEY_ID", draws, "file")
    secret = _decoy_value("AWS_SECRET_ACCESS_KEY", draws, "file")
    text = f"[default]\naws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n"
    where = "~/.aws/credentials"
    return Decoys(env, text, {f"{where} aws_access_key_id": key_id, f"{where} aws_secret_access_key": secret})


@dataclass(frozen=True, slots=True)
class Marker:
    kind: str  # "placeholder" or "decoy"
    name: str  # the route name, or the decoy's variable name
    shared_with: tuple[str, ...] = ()  # other routes holding the same placeholder (a session's AWS keys)

    def belongs_to(self, route: str) -> bool:
        return self.kind == "placeholder" and route in (self.name, *self.shared_with)

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class SecretScanner:
    """Finds placeholders and decoys in bytes or text (case-insensitive). Values are never exposed."""

    __slots__ = ("_by_value", "_pattern")

    def __init__(self, placeholders: Mapping[str, Iterable[str]], decoys: Mapping[str, str]) -> None:
        """``placeholders``: each route's values (Route.placeholders); ``decoys``: variable -> value."""
        by_value: dict[bytes, Marker] = {}
        for name, value in ((n, v) for n, values in placeholders.items() for v in values):
            known = by_value.get(value.lower().encode())
            by_value[value.lower().encode()] = Marker("placeholder", known.name, (*known.shared_with, name)) \
                if known else Marker("placeholder", name)
        for name, value in decoys.items():
            by_value[value.lower().encode()] = Marker("decoy", name)
        self._by_value = by_value
        # Longest first, so that a value that contains another is named by itself.
        alternatives = sorted(by_value, key=len, reverse=True)
        self._pattern = re.compile(b"|".join(re.escape(v) for v in alternatives), re.IGNORECASE) if by_value \
            else None

    def __repr__(self) -> str:
        return f"SecretScanner({len(self._by_value)} values)"

    def find_all(self, data: bytes | str) -> list[Marker]:
        if self._pattern is None:
            return []
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        found: list[Marker] = []
        for match in self._pattern.finditer(raw):
            marker = self._by_value[match.group(0).lower()]
            if marker not in found:
                found.append(marker)
        return found

    def find(self, data: bytes | str) -> Marker | None:
        """The first placeholder or decoy in ``data``, or None."""
        if self._pattern is None:
            return None
        raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else data
        match = self._pattern.search(raw)
        return self._by_value[match.group(0).lower()] if match else None
