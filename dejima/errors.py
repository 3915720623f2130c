"""Errors dejima reports to its user.

This module imports nothing from dejima, so every layer (the pure core, the adapters, the
filter process inside its container) can raise these without import cycles.

    DejimaError                  root; anything dejima itself reports
    └── DiagnosticError          a failure written for the user: reference, message, context, hint
        ├── InputError           bad input (exit 2): the file, key or flag, and the fix
        │   ├── SettingsError    the user's settings file is unusable
        │   ├── UsageError       bad command-line arguments
        │   └── (core) PolicyError, ManifestError: bad egress entries, bad manifests
        ├── GrantRefused         a running session's filter refused a live grant or revoke (nothing changed)
        ├── EngineError          the container engine is unreachable or refused a request
        ├── ImageError           an image could not be pulled, bootstrapped or built
        └── SessionError         a session could not start, or its boundary could not be verified
            ├── FilterError      the filter container did not apply or verify its ruleset
            └── SessionEnded     the session ended before a change reached it (dejima-allow exits 4)

Each error carries a kebab-case ``reference`` so that messages can be searched for in the docs
and asserted in tests.
"""

from __future__ import annotations

import re

_KEBAB = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*\Z")


class ExitStatus:
    """Every exit status dejima chooses, named in this one place: the CLI's commands return them, the layers
    below put them on their errors (``exit_code=``), the start gate and the filter exit with them. A session
    exits with its command's own status."""

    SUCCESS = 0
    FAILURE = 1  # a management command failed (e.g. doctor found a problem)
    USAGE = 2  # bad input: a flag, a file, an entry (every InputError)
    SESSION_ENDED = 4  # dejima-allow: the session ended before the change reached it (nothing changed in it)
    UNREVIEWED_FINDINGS = 122  # the start refused: earlier sessions left unreviewed critical findings; nothing started
    DEJIMA_FAILED = 125  # dejima itself failed before or around the session (as `docker run` does)
    COMMAND_NOT_FOUND = 127  # the session's command does not exist in the image
    SIGNALLED = 128  # + N: the launcher or its command ended on signal N (as a shell reports it)
    INTERRUPTED = 130  # SIGNALLED + SIGINT: a management command stopped by Ctrl-C
    # The filter process's own (its container's status; the launcher reads its last line, not these)
    FILTER_NOT_READY = 3  # it failed before its ready line: no session starts
    FILTER_STOPPED = 4  # it failed after its ready line: the session's processes die with it
    # A process of the snapshot walk (forked by the tree walk): 0 and 1 are its result and its failure
    WALKER_CUT_SHORT = 2  # it stopped before its result was written

    @staticmethod
    def signalled(signum: int) -> int:
        return ExitStatus.SIGNALLED + signum


class DejimaError(Exception):
    """Root of every error dejima raises on purpose."""


class DiagnosticError(DejimaError):
    """A failure explained for the user: what happened, where, and what to do."""

    reference: str = "dejima-error"

    def __init__(
        self,
        message: str,
        *,
        context: str | None = None,
        hint: str | None = None,
        reference: str | None = None,
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.context = context
        self.hint = hint
        self.exit_code = exit_code  # None: the command's usual failure status
        if reference is not None:
            self.reference = reference
        if not _KEBAB.match(self.reference):
            raise ValueError(f"error reference must be kebab-case: {self.reference!r}")

    def __str__(self) -> str:
        parts = [self.message]
        if self.context:
            parts.append(self.context)
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return "\n".join(parts)


class InputError(DiagnosticError):
    """Input dejima refuses — a manifest, the settings, a flag, an entry, a control message: every
    command exits 2 on it, whichever place the input came from."""

    reference = "invalid-input"


class SettingsError(InputError):
    reference = "invalid-settings"


class UsageError(InputError):
    reference = "invalid-usage"


class GrantRefused(DiagnosticError):
    """A running session's filter refused a change (a name on the deny list, say): nothing changed in it."""

    reference = "grant-refused"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint, exit_code=ExitStatus.FAILURE)


class EngineError(DiagnosticError):
    reference = "engine-unavailable"


class ImageError(DiagnosticError):
    reference = "image-unavailable"


class SessionError(DiagnosticError):
    reference = "session-failed"


class FilterError(SessionError):
    reference = "filter-not-verified"


class SessionEnded(SessionError):
    """The session ended before a change sent to it arrived: nothing changed in it."""

    reference = "session-ended"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message, hint=hint, exit_code=ExitStatus.SESSION_ENDED)
