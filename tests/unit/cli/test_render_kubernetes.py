"""`dejima PATH --render kubernetes|pod`: the session as objects for kubectl, with no engine and no secret."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from dejima.cli.launch import main
from dejima.errors import ExitStatus
from tests.unit.cli.test_launch_errors import captured, owned_by_a_user, write_settings

__all__ = ["captured"]  # the fixture, used by name

CLUSTER = """\
[kubernetes]
filter_image = "registry.example.com/dejima/filter:1"
session_image = "registry.example.com/dejima/session:1"
dns_upstreams = ["10.96.0.10"]
namespace = "agents"
"""


def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return owned_by_a_user(path)


@pytest.mark.parametrize(("form", "kind"), [("kubernetes", "Sandbox"), ("pod", "Pod")])
def test_render_kubernetes_prints_the_objects(form: str, kind: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                              captured: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    write_settings(monkeypatch, tmp_path, CLUSTER)
    assert main([str(workspace(tmp_path)), "--render", form, "--allow", "pypi.org", "--", "make", "test"]) == 0
    documents = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in documents] == ["ConfigMap", "NetworkPolicy", kind]
    assert all(d["metadata"]["namespace"] == "agents" for d in documents)
    pod = documents[2]
    spec = pod["spec"]["podTemplate"]["spec"] if kind == "Sandbox" else pod["spec"]
    assert spec["containers"][0]["args"] == ["make", "test"]
    assert spec["initContainers"][0]["image"] == "registry.example.com/dejima/filter:1"
    assert '"upstreams": ["10.96.0.10"]' in documents[0]["data"]["filter.json"]  # the cluster's DNS, not the host's


def test_render_kubernetes_needs_the_images_and_says_where(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           captured: io.StringIO) -> None:
    settings = write_settings(monkeypatch, tmp_path, '[kubernetes]\nfilter_image = "r.example/f:1"\n')
    assert main([str(workspace(tmp_path)), "--render", "kubernetes"]) == ExitStatus.USAGE
    output = captured.getvalue()
    assert f"2 [kubernetes] settings are missing in {settings}" in output
    assert "[kubernetes] session_image: " in output and "dejima images list" in output


def test_render_kubernetes_needs_the_clusters_dns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                  captured: io.StringIO, capsys: pytest.CaptureFixture[str]) -> None:
    write_settings(monkeypatch, tmp_path, CLUSTER.replace('dns_upstreams = ["10.96.0.10"]\n', ""))
    assert main([str(workspace(tmp_path)), "--render", "kubernetes"]) == ExitStatus.USAGE
    assert "kubectl -n kube-system get service kube-dns" in captured.getvalue()
    assert main([str(tmp_path / "ws"), "--render", "kubernetes", "--dns-upstream", "10.96.0.10"]) == 0
    assert "10.96.0.10" in capsys.readouterr().out


def test_an_unknown_render_format_is_refused(tmp_path: Path, captured: io.StringIO,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([str(workspace(tmp_path)), "--render", "helm"])
    assert stopped.value.code == ExitStatus.USAGE
    error = capsys.readouterr().err
    assert "argument --render: invalid choice: 'helm'" in error and "kubernetes" in error and "pod" in error


def test_the_api_renders_what_the_command_line_prints(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, captured: io.StringIO,
        capsys: pytest.CaptureFixture[str]) -> None:
    from dejima import api

    write_settings(monkeypatch, tmp_path, CLUSTER)
    path = workspace(tmp_path)
    assert main([str(path), "--render", "pod", "--allow", "pypi.org", "--", "make", "test"]) == 0
    printed = capsys.readouterr().out
    assert api.render_kubernetes(api.Request(path, ["make", "test"], allow=["pypi.org"]), "Pod") == printed
