"""Names of the labels dejima puts on everything it creates.

Resources are always found by these labels, never by guessing names.
"""

from __future__ import annotations

PREFIX = "dejima."
SCOPE = "dejima.scope"  # which dejima installation owns it (tests use their own scope)
SESSION = "dejima.session"  # session id
ROLE = "dejima.role"  # "filter" or "session" (containers), "filter"/"session"/"base" (images)
WORKSPACE = "dejima.workspace"  # absolute host path of the workspace
LAUNCHER = "dejima.launcher"  # "<boot id>:<pid>:<start time>" of the launching process
RECIPE_HASH = "dejima.recipe-hash"  # content hash of an image's inputs

ROLE_FILTER = "filter"
ROLE_SESSION = "session"
ROLE_BASE = "base"
