"""Run by the session image's own python3 (``python3 -c``, in a throwaway container with no network),
never imported by dejima: makes environments with the image's ``python3 -m venv`` (and its ``uv venv``,
when uv is there) at a path and with a prompt of its own, and prints what they hold as one JSON
line on stdout: every file's text and every link's target, and the wheels ensurepip seeded and the
bytecode it compiled (base64).
dejima/core/audit/venv_facts.py turns that into the templates the audit compares environments with.
Python 3.7 syntax: the image's interpreter may be older than dejima's."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile

NAME, PROMPT = "dejimavenvname", "dejimavenvprompt"  # need no quoting in any shell


def listing(top: str) -> dict[str, object]:
    files: dict[str, str | None] = {}
    links: dict[str, str] = {}
    for directory, names, filenames in os.walk(top):
        for name in names + filenames:
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, top)
            if os.path.islink(path):
                links[relative] = os.readlink(path)
            elif name in filenames and os.path.isfile(path):
                with open(path, "rb") as file:
                    data = file.read(1 << 20)
                try:
                    files[relative] = data.decode("utf-8")
                except UnicodeDecodeError:  # no template: the host records no such tool
                    files[relative] = None
    return {"dir": top, "files": files, "links": links}


def made(command: list[str], top: str, environment: dict[str, str]) -> dict[str, object]:
    subprocess.run(command + [top], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   env=environment, timeout=300)
    return listing(top)


def seeds(top: str) -> list[dict[str, str]]:
    """The wheels ensurepip installed in the environment at ``top`` (Debian's or ensurepip's own)."""
    import ensurepip

    places = [sysconfig.get_config_var("WHEEL_PKG_DIR") or "", "/usr/share/python-wheels",
              os.path.join(os.path.dirname(ensurepip.__file__), "_bundled")]
    site = [d for d, _, _ in os.walk(top) if d.endswith("site-packages")][0]
    found = []
    for info in sorted(os.listdir(site)):
        if not info.endswith(".dist-info"):
            continue
        prefix = info[:-len(".dist-info")] + "-"
        wheel = next((os.path.join(p, n) for p in places if os.path.isdir(p) for n in sorted(os.listdir(p))
                      if n.startswith(prefix) and n.endswith(".whl")), None)
        if wheel is None:
            raise SystemExit("no wheel for " + info)
        with open(wheel, "rb") as file:
            found.append({"file": os.path.basename(wheel), "data": base64.b64encode(file.read()).decode()})
    return found


def bytecode(top: str) -> dict[str, str]:
    """The bytecode ensurepip compiled in the environment at ``top`` (path below site-packages ->
    base64): the host reads what of it the environment's path and the writing process do not decide."""
    site = [d for d, _, _ in os.walk(top) if d.endswith("site-packages")][0]
    found = {}
    for directory, _, filenames in os.walk(site):
        for name in filenames:
            if name.endswith(".pyc"):
                with open(os.path.join(directory, name), "rb") as file:
                    found[os.path.relpath(os.path.join(directory, name), site)] = base64.b64encode(file.read()).decode()
    return found


def _has_ensurepip() -> bool:
    """Whether this python3's venv can seed pip (the record then has no seeds: a seeded environment
    in its sessions is not verified, rather than every start probing again for one it cannot make)."""
    try:
        import ensurepip  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def main() -> None:
    work = tempfile.mkdtemp(prefix="dejimavenvdir")
    environment = dict(os.environ, UV_PYTHON_DOWNLOADS="never", UV_CACHE_DIR=os.path.join(work, "cache"),
                       UV_NO_CONFIG="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    tools: dict[str, dict[str, object]] = {}
    venv = [sys.executable, "-m", "venv"]
    tools["venv"] = {"plain": made(venv + ["--without-pip"], os.path.join(work, "a", NAME), environment),
                     "prompted": made(venv + ["--without-pip", "--prompt", PROMPT], os.path.join(work, "b", NAME),
                                      environment)}
    if _has_ensurepip():
        seeded = os.path.join(work, "c", NAME)
        made(venv, seeded, environment)
        tools["venv"]["seeds"] = seeds(seeded)
        tools["venv"]["bytecode"] = bytecode(seeded)
    else:  # Debian's python3 without python3-venv: its venv makes environments without pip only
        tools["venv"]["seeds"], tools["venv"]["bytecode"] = [], {}
    uv = shutil.which("uv")
    if uv is not None:
        command = [uv, "venv", "--quiet", "--python", sys.executable]
        tools["uv"] = {"plain": made(command, os.path.join(work, "d", NAME), environment),
                       "prompted": made(command + ["--prompt", PROMPT], os.path.join(work, "e", NAME), environment),
                       "seeds": []}
    sys.stdout.write(json.dumps({"format": 2, "name": NAME, "prompt": PROMPT, "tools": tools}) + "\n")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
