"""Your policy for one project: ``$XDG_CONFIG_HOME/dejima/projects/<name>-<hash>.toml``.

It holds what you allowed for that workspace alone (``dejima-allow --persist`` writes it; you
may edit it): ``[network] allow = [...]``, read by every session on that workspace, on top of
the settings. It lives with your configuration, not in the repository: the repository is what
the agent writes, so it may only narrow a policy, never widen it. Edits keep the file's comments
and order (adapters/tomledit.py).
"""

from __future__ import annotations

from pathlib import Path

from dejima.adapters import host
from dejima.core.kinds import ALLOW_ENTRY
from dejima.core.schema import Key, Table, check_data, list_of, parse_toml, table
from dejima.errors import SettingsError

HEADER = """\
# dejima: your policy for {workspace}
# Entries here are allowed in every session on that workspace, on top of your settings.
# `dejima-allow --persist` adds to this list; edit it as you like.
"""


def policy_path(workspace: Path) -> Path:
    return host.config_dir() / "projects" / (host.home_dir_for(workspace).name + ".toml")


PROJECT_POLICY = table(Table({"network": Key(table(Table({
    "allow": Key(list_of(ALLOW_ENTRY), "entries every session on this workspace may reach, on top of the settings"),
}, "[network]")), "a project policy holds only [network] allow = [...]")}, "a project policy"))


def read_allow(workspace: Path) -> tuple[tuple[str, ...], str]:
    """The project's allowed entries and the file they come from (none when it is absent)."""
    path = policy_path(workspace)
    try:
        text = path.read_text()
    except FileNotFoundError:
        return (), str(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read this project's policy: {exc}",
                            hint="fix the file, or move it away to drop the project's own entries") from exc
    data = parse_toml(text, str(path), SettingsError, "fix the file, or move it away to drop the project's own entries")
    checked = check_data(data, PROJECT_POLICY, str(path), SettingsError)
    return tuple(checked.get("network", {}).get("allow", ())), str(path)


def persist_allow(workspace: Path, entries: list[str]) -> Path:
    """Add ``entries`` (already validated) to the project's allow list, keeping what is there."""
    from dejima.adapters.tomledit import with_entries

    read_allow(workspace)  # a broken file is reported, never overwritten
    path = policy_path(workspace)
    text = path.read_text() if path.exists() else HEADER.format(workspace=workspace)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temporary = path.with_suffix(".toml.tmp")
    temporary.write_text(with_entries(text, "network", "allow", entries))
    temporary.replace(path)
    return path
