"""A real credential value that never shows itself: not in repr, str, format, pickles or comparisons' timing."""

from __future__ import annotations

import hmac


class Secret:
    """A real credential value. Its repr/str never show it; only :meth:`reveal` does."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        if not value or any(c in value for c in "\r\n\0"):
            raise ValueError("a secret must be one non-empty line")
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret(<hidden>)"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return repr(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and hmac.compare_digest(self._value.encode(), other._value.encode())

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a Secret is never pickled")
