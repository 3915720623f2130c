"""Rendering of Dockerfile templates (docker/*/Dockerfile.j2) from typed values.

Templates are strict: an undefined name is an error, never an empty string, so a typo in a
template cannot silently drop a rule.
"""

from __future__ import annotations

from typing import Any

import jinja2


def render_template_text(text: str, **values: Any) -> str:
    """Render a template given as text (e.g. a Dockerfile template from docker/)."""
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
    return env.from_string(text).render(**values)
