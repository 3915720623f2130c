"""Push rules for git smart-HTTP (placeholder, filled in the push-rules step)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PushPolicy:
    repositories: tuple[str, ...]  # repository paths on the route's upstream, e.g. "owner/repo"
    allow_force: bool = False
    allow_default_branch: bool = False
