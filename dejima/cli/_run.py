"""The one wrapper that turns dejima's exceptions into messages and exit statuses."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable

from dejima.cli import exit_codes
from dejima.errors import DiagnosticError, UsageError
from dejima.ui.console import UI

DEBUG_ENV = "DEJIMA_DEBUG"


def run_main(body: Callable[[UI], int], ui: UI | None = None, failure: int = exit_codes.DEJIMA_FAILED) -> int:
    ui = ui or UI()
    try:
        return body(ui)
    except UsageError as exc:
        ui.error(exc)
        return exc.exit_code or exit_codes.USAGE
    except DiagnosticError as exc:
        ui.error(exc)
        if os.environ.get(DEBUG_ENV):
            traceback.print_exc(file=sys.stderr)
        return exc.exit_code or failure
    except KeyboardInterrupt:
        ui.warn("interrupted")
        return 130
    except BrokenPipeError:
        return exit_codes.FAILURE
