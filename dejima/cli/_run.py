"""The one wrapper that turns dejima's exceptions into messages and exit statuses.

Whatever escapes as an unexpected exception is a bug in dejima: the user gets one short message
saying so (the exception's type and text, escaped like every other message) and exit 125; the
traceback only when $DEJIMA_DEBUG is set, for the report."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

from dejima.errors import DiagnosticError, ExitStatus, InputError
from dejima.ui.console import UI

DEBUG_ENV = "DEJIMA_DEBUG"


class InternalError(DiagnosticError):
    reference = "internal-error"


def run_main(body: Callable[[UI], int], ui: UI | None = None, failure: int = ExitStatus.DEJIMA_FAILED) -> int:
    ui = ui or UI()
    try:
        return body(ui)
    except InputError as exc:  # bad input, whichever file, key or flag it came from
        ui.error(exc)
        return exc.exit_code or ExitStatus.USAGE
    except DiagnosticError as exc:
        ui.error(exc)
        _debug_traceback()
        return exc.exit_code or failure
    except KeyboardInterrupt:
        ui.warn("interrupted")
        return ExitStatus.INTERRUPTED
    except BrokenPipeError:
        return ExitStatus.FAILURE
    except Exception as exc:  # anything else is a bug: say so, never dump a raw traceback
        ui.error(InternalError(
            f"this is a bug in dejima, please report it: {type(exc).__name__}: {exc}",
            hint=f"run again with {DEBUG_ENV}=1 to see the traceback, and include it in the report",
        ))
        _debug_traceback()
        return ExitStatus.DEJIMA_FAILED


def _debug_traceback() -> None:
    if os.environ.get(DEBUG_ENV):
        traceback.print_exc(file=sys.stderr)
