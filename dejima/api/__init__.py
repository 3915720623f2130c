"""dejima as a library: plan and render a session, run a command in one, change a running session's
grants, read what sessions left (violations, the credential ledger, audit findings), and manage sessions,
images, settings and manifests (what `dejima sessions`, `stop`, `clean`, `doctor`, `images`, `settings` and
`manifests` do).

    from dejima import api

    request = api.Request("/home/me/repos/project", ["make", "test"], allow=["pypi.org"])
    print(api.render(request).text)          # what `dejima PATH --render` prints: no engine, no secret read
    with api.Session(request) as session:    # the start's steps: images, credentials, the plan
        status = session.run()               # the container pair, the command's output streamed, its status
    api.violations(session.session_id)       # what the session was refused

Everything in ``__all__`` is the public surface (docs/api.md); anything else of dejima is private.
Failures are dejima's own typed errors (``dejima.errors``, re-exported here), the ones the command line
turns into its messages and exit statuses: ``InputError`` (bad input: exit 2), ``SessionError``,
``EngineError``... each with a message, a hint and a kebab-case ``reference``.

Importing this package costs next to nothing: each function imports what it uses when it is called
(a session's start imports as little as it can before its filter is started), and the types named
in ``__all__`` from the layers below are loaded when first asked for. Its modules, one job each:
``plans`` (the request and its render), ``session`` (a command run in a session), ``reporting``
(the quiet reporter), ``grants`` (live grants), ``records`` (violations, ledger, findings) and ``manage``
(sessions, images, settings, manifests).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dejima.api.grants import (
    check_duration,
    check_grant_entry,
    grant,
    live,
    persist_grants,
    revoke,
    running_session,
    running_sessions,
)
from dejima.api.manage import (
    ImageInfo,
    ImageUse,
    ManifestInfo,
    bootstrap_base,
    build_images,
    clean,
    doctor,
    doctor_session,
    images,
    images_in_use,
    manifest,
    manifest_reference,
    manifests,
    prune_images,
    sessions,
    settings_path,
    settings_reference,
    stop,
)
from dejima.api.plans import Rendered, Request, load_settings, render, render_kubernetes
from dejima.api.records import (
    acknowledge,
    findings,
    findings_by_id,
    ledger,
    recorded_sessions,
    restore,
    violations,
)
from dejima.api.reporting import QuietReporter
from dejima.api.session import OutputTarget, Session, run
from dejima.errors import (
    DejimaError,
    DiagnosticError,
    EngineError,
    ExitStatus,
    FilterError,
    GrantRefused,
    ImageError,
    InputError,
    SessionEnded,
    SessionError,
    SettingsError,
    UsageError,
)

if TYPE_CHECKING:
    from dejima.adapters.control_client import RunningSession
    from dejima.adapters.findings import Stored as Finding
    from dejima.adapters.image_builds import Base as BaseImage
    from dejima.core.manifest import KINDS as MANIFEST_KINDS
    from dejima.core.manifest import Manifest
    from dejima.core.plan import SessionPlan
    from dejima.core.settings import Settings
    from dejima.orchestration.doctor import Check as DoctorCheck
    from dejima.orchestration.manage_sessions import SessionInfo
    from dejima.orchestration.session_doctor import SessionCheck
    from dejima.orchestration.session_reporter import SessionReporter as Reporter
    from dejima.orchestration.start_plan import StartPlan

__all__ = [
    # plans
    "Request", "Rendered", "render", "render_kubernetes", "load_settings", "Settings", "SessionPlan", "StartPlan",
    # sessions
    "Session", "run", "OutputTarget", "Reporter", "QuietReporter",
    # live grants
    "RunningSession", "running_sessions", "running_session", "live", "grant", "revoke", "persist_grants",
    "check_grant_entry", "check_duration",
    # records
    "recorded_sessions", "violations", "ledger", "Finding", "findings", "findings_by_id", "acknowledge", "restore",
    # management
    "SessionInfo", "sessions", "stop", "clean", "DoctorCheck", "doctor", "SessionCheck", "doctor_session",
    "ImageInfo", "BaseImage", "images", "build_images", "bootstrap_base", "prune_images",
    "ImageUse", "images_in_use",
    "settings_path", "settings_reference",
    "ManifestInfo", "Manifest", "MANIFEST_KINDS", "manifests", "manifest", "manifest_reference",
    # errors
    "DejimaError", "DiagnosticError", "InputError", "SettingsError", "UsageError", "EngineError", "ImageError",
    "SessionError", "FilterError", "SessionEnded", "GrantRefused", "ExitStatus",
]


def __getattr__(name: str) -> object:
    """The types of ``__all__`` that live in the layers below, imported when first asked for."""
    if name == "Settings":
        from dejima.core.settings import Settings

        return Settings
    if name == "SessionPlan":
        from dejima.core.plan import SessionPlan

        return SessionPlan
    if name == "StartPlan":
        from dejima.orchestration.start_plan import StartPlan

        return StartPlan
    if name == "Reporter":
        from dejima.orchestration.session_reporter import SessionReporter

        return SessionReporter
    if name == "RunningSession":
        from dejima.adapters.control_client import RunningSession

        return RunningSession
    if name == "Finding":
        from dejima.adapters.findings import Stored

        return Stored
    if name == "SessionInfo":
        from dejima.orchestration.manage_sessions import SessionInfo

        return SessionInfo
    if name == "DoctorCheck":
        from dejima.orchestration.doctor import Check

        return Check
    if name == "SessionCheck":
        from dejima.orchestration.session_doctor import SessionCheck

        return SessionCheck
    if name == "BaseImage":
        from dejima.adapters.image_builds import Base

        return Base
    if name in ("Manifest", "MANIFEST_KINDS"):
        from dejima.core import manifest

        return manifest.Manifest if name == "Manifest" else manifest.KINDS
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
