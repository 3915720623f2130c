"""`dejima completion bash|zsh|fish`: a shell completion script for dejima, dejima-audit and dejima-allow.

What it completes is read from the commands' own argument parsers (subcommands, actions, flags) and, for
--harness, --backend, --workflow, --forge and `manifests show`, from the manifests installed when the
script is made: add a manifest, make the script again."""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass, field

from dejima.errors import ExitStatus

SHELLS = ("bash", "zsh", "fish")
DIRECTORIES = "@directories"  # a value completed from the file system, not from a list
PATH_FLAGS = frozenset({"--workspace"})  # flags whose value is a directory
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\Z")


@dataclass
class Context:
    """What may follow a command (``dejima``, ``dejima images``, ``dejima-audit ack``): its flags, the flags'
    values where they are known, and the words it takes (subcommands, actions, names)."""

    flags: list[str] = field(default_factory=list)
    values: dict[str, list[str]] = field(default_factory=dict)  # flag -> its values ([] : a free value)
    words: list[str] = field(default_factory=list)


def contexts(launch_parser: argparse.ArgumentParser) -> dict[str, Context]:
    """Every command and subcommand, keyed as typed: "dejima", "dejima images", "dejima-audit ack"."""
    from dejima import api
    from dejima.cli import allow, audit
    from dejima.cli.manage import COMMANDS, PARSERS

    # Only names a shell takes as plain words: bash's compgen -W expands what it is given ($(...) included).
    found = [m for m in api.manifests() if _PLAIN.match(m.name)]
    names = {kind: sorted({m.name for m in found if m.kind == kind and not m.broken}) for kind in api.MANIFEST_KINDS}
    top = _context(launch_parser)
    top.words = sorted([*COMMANDS, "completion"])
    top.values.update({"--harness": names["harnesses"], "--backend": names["backends"],
                       "--workflow": names["workflows"], "--forge": names["forges"]})
    result = {"dejima": top}
    for name, build in sorted(PARSERS.items()):
        result[f"dejima {name}"] = _context(build())
    result["dejima manifests"].words += sorted(m.ref for m in found)
    result["dejima completion"] = _context(build_parser())
    audit_parser = audit.build_parser()
    result["dejima-audit"] = _context(audit_parser)
    for action, parser in _subparsers(audit_parser).items():
        result[f"dejima-audit {action}"] = _context(parser)
    result["dejima-allow"] = _context(allow.build_parser())
    return result


def _context(parser: argparse.ArgumentParser) -> Context:
    context = Context()
    for action in parser._actions:  # argparse keeps no public list of what a parser takes
        if isinstance(action, argparse._SubParsersAction):
            context.words += list(action.choices)
        elif action.option_strings:
            long = [o for o in action.option_strings if o.startswith("--")] or action.option_strings
            context.flags += long
            if action.nargs != 0:
                for flag in long:
                    context.values[flag] = [DIRECTORIES] if flag in PATH_FLAGS else \
                        [str(c) for c in action.choices or ()]
        elif action.choices:
            context.words += [str(c) for c in action.choices]
    return context


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: sub for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, sub in action.choices.items()}


def _words(items: list[str]) -> str:
    return shlex.quote(" ".join(items))


def bash_script(found: dict[str, Context]) -> str:
    lines = ["# dejima shell completion (bash): eval \"$(dejima completion bash)\", or save it in",
             "# ~/.local/share/bash-completion/completions/dejima (and links dejima-audit, dejima-allow to it)",
             "declare -gA _DEJIMA_FLAGS=() _DEJIMA_WORDS=() _DEJIMA_VALUES=()"]
    for key, context in found.items():  # keys unquoted, as "dejima/images": zsh would keep quotes in the key
        key = key.replace(" ", "/")
        lines.append(f"_DEJIMA_FLAGS[{key}]={_words(context.flags)}")
        lines.append(f"_DEJIMA_WORDS[{key}]={_words(context.words)}")
        for flag, values in context.values.items():
            lines.append(f"_DEJIMA_VALUES[{key}/{flag}]={_words(values) if values else '@free'}")
    lines.append(_BASH_FUNCTION)
    return "\n".join(lines) + "\n"


_BASH_FUNCTION = r'''_dejima_complete() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="" key="${COMP_WORDS[0]##*/}" i word
    (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"
    COMPREPLY=()
    for (( i = 1; i < COMP_CWORD; i++ )); do
        word="${COMP_WORDS[i]}"
        if [[ "$word" == "--" ]]; then  # the session's command: the shell's own completion
            COMPREPLY=($(compgen -c -- "$cur")); return 0
        fi
        if [[ "$key" != */* && "$word" != -* && " ${_DEJIMA_WORDS[$key]} " == *" $word "* \
              && -n "${_DEJIMA_FLAGS[$key/$word]+set}" ]]; then
            key="$key/$word"
        fi
    done
    if [[ -n "${_DEJIMA_VALUES[$key/$prev]+set}" ]]; then
        case "${_DEJIMA_VALUES[$key/$prev]}" in
            @free) ;;
            @directories) COMPREPLY=($(compgen -d -- "$cur")) ;;
            *) COMPREPLY=($(compgen -W "${_DEJIMA_VALUES[$key/$prev]}" -- "$cur")) ;;
        esac
        return 0
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "${_DEJIMA_FLAGS[$key]}" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "${_DEJIMA_WORDS[$key]}" -- "$cur"))
        [[ "$key" == "dejima" ]] && COMPREPLY+=($(compgen -d -- "$cur"))  # the workspace
    fi
    return 0
}
complete -F _dejima_complete dejima dejima-audit dejima-allow'''


def zsh_script(found: dict[str, Context]) -> str:
    """zsh runs the bash script through its bash compatibility (bashcompinit)."""
    return ("# dejima shell completion (zsh): eval \"$(dejima completion zsh)\" in ~/.zshrc, after compinit\n"
            "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(found))


def fish_script(found: dict[str, Context]) -> str:
    lines = ["# dejima shell completion (fish): dejima completion fish > ~/.config/fish/completions/dejima.fish"]
    for key, context in found.items():
        program, _, sub = key.partition(" ")
        commands = found[program].words
        condition = (f"__fish_seen_subcommand_from {sub}" if sub else
                     f"not __fish_seen_subcommand_from {' '.join(commands)}" if commands else "true")
        head = f"complete -c {program} -n {shlex.quote(condition)}"
        if context.words and (sub or program != "dejima"):
            lines.append(f"{head} -f -a {_words(context.words)}")
        elif context.words:
            lines.append(f"{head} -a {_words(context.words)}")  # the workspace, or a command
        for flag in context.flags:
            values = context.values.get(flag)
            if values == [DIRECTORIES]:
                lines.append(f"{head} -l {flag[2:]} -r -a '(__fish_complete_directories)'")
            elif values:
                lines.append(f"{head} -l {flag[2:]} -x -a {_words(values)}")
            else:
                lines.append(f"{head} -l {flag[2:]}" + (" -r" if values is not None else ""))
    return "\n".join(lines) + "\n"


SCRIPTS = {"bash": bash_script, "zsh": zsh_script, "fish": fish_script}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dejima completion",
        description="Print a shell completion script for dejima, dejima-audit and dejima-allow: subcommands, "
        "flags, and the names of the installed manifests (--harness, --backend, --workflow, --forge). "
        "bash: eval \"$(dejima completion bash)\" in ~/.bashrc; zsh: the same in ~/.zshrc, after compinit; "
        "fish: dejima completion fish > ~/.config/fish/completions/dejima.fish.",
    )
    parser.add_argument("shell", choices=SHELLS, metavar="SHELL", help=f"one of {', '.join(SHELLS)}")
    return parser


def completion(argv: list[str], launch_parser: argparse.ArgumentParser) -> int:
    """`dejima completion SHELL`; ``launch_parser`` is dejima's own (the launcher's, passed in: no import cycle)."""
    args = build_parser().parse_args(argv)
    print(SCRIPTS[args.shell](contexts(launch_parser)), end="")
    return ExitStatus.SUCCESS
