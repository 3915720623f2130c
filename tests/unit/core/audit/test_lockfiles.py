"""Lockfile digests are compared per artifact and algorithm: more detail is not a swap."""

from dejima.core.audit.lockfiles import _go_sum, _npm, _toml_packages

UV = '''
[[package]]
name = "six"
version = "1.16.0"
sdist = {{ url = "https://files.example/six-1.16.0.tar.gz", hash = "sha256:{sdist}"{extra} }}
wheels = [{{ url = "https://files.example/six-1.16.0-py2.py3-none-any.whl", hash = "sha256:{wheel}" }}]
'''


def swapped(old: dict[str, str], new: dict[str, str]) -> list[str]:
    return [a for a, d in new.items() if a in old and old[a] != d]


def test_uv_upload_times_and_new_wheels_are_not_a_swap_but_a_new_digest_is() -> None:
    base = _toml_packages(UV.format(sdist="aa", wheel="bb", extra=""))
    assert swapped(base, _toml_packages(UV.format(sdist="aa", wheel="bb", extra=', upload-time = "2024"'))) == []
    assert swapped(base, _toml_packages(UV.format(sdist="aa", wheel="cc", extra=""))) == [
        "https://files.example/six-1.16.0-py2.py3-none-any.whl sha256"]


def npm(integrity: str) -> dict[str, str]:
    return _npm('{"packages": {"node_modules/a": {"version": "1.0.0", "integrity": "%s"}}}' % integrity)


def test_npm_and_go_digests() -> None:
    assert swapped(npm("sha1-x"), npm("sha512-y sha1-x")) == []
    assert swapped(npm("sha1-x"), npm("sha1-z")) == ["node_modules/a@1.0.0 sha1"]
    assert swapped(_go_sum("m v1 h1:a=\n"), _go_sum("m v1 h1:b=\nm v2 h1:c=\n")) == ["m@v1 h1"]
