"""Placeholders look like the real key, are unique per session, and are recognised anywhere, in any case."""

from dejima.core.placeholders import SecretScanner, make_decoys, make_placeholder


def test_placeholders_are_shaped_like_the_key() -> None:
    assert make_placeholder("api.anthropic.com", "x-api-key").startswith("sk-ant-api03-")
    assert make_placeholder("api.anthropic.com", "authorization").startswith("sk-ant-oat01-")
    assert make_placeholder("api.github.com", "authorization").startswith("ghp_")
    assert make_placeholder("example.internal", "x-key").startswith("dejima-placeholder-")
    assert make_placeholder("api.openai.com", "authorization") != make_placeholder("api.openai.com", "authorization")


def test_decoys_skip_names_routes_use() -> None:
    decoys = make_decoys(["AWS_ACCESS_KEY_ID"])
    assert "AWS_ACCESS_KEY_ID" not in decoys.env and decoys.env["AWS_SECRET_ACCESS_KEY"]
    assert decoys.aws_credentials_file.startswith("[default]\naws_access_key_id = AKIA")
    assert decoys.values()["~/.aws/credentials aws_access_key_id"] in decoys.aws_credentials_file


def test_the_scanner_names_what_it_finds() -> None:
    ph = make_placeholder("api.anthropic.com", "x-api-key")
    decoys = make_decoys()
    scanner = SecretScanner({"anthropic-api-key": (ph,)}, decoys.values())
    assert str(scanner.find(f"GET /?k={ph}".encode())) == "placeholder anthropic-api-key"
    dns_name = f"{ph.lower()}.exfil.example."
    assert str(scanner.find(dns_name)) == "placeholder anthropic-api-key"  # DNS folds case
    assert str(scanner.find(decoys.env["AWS_ACCESS_KEY_ID"].lower())) == "decoy AWS_ACCESS_KEY_ID"
    assert scanner.find(b"nothing here") is None
    assert ph not in repr(scanner)
    assert SecretScanner({}, {}).find("x") is None
