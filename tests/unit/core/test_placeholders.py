"""Placeholders look like the real key, are unique per session, and are recognised anywhere, in any case."""

from dejima.adapters.session_dirs import new_draws
from dejima.core.placeholders import Draws, SecretScanner, make_decoys, make_placeholder

DRAWS = new_draws()


def test_placeholders_are_shaped_like_the_key() -> None:
    assert make_placeholder("api.anthropic.com", "x-api-key", DRAWS).startswith("sk-ant-api03-")
    assert make_placeholder("api.anthropic.com", "authorization", DRAWS).startswith("sk-ant-oat01-")
    assert make_placeholder("api.github.com", "authorization", DRAWS).startswith("ghp_")
    assert make_placeholder("example.internal", "x-key", DRAWS).startswith("dejima-placeholder-")
    assert make_placeholder("api.openai.com", "authorization", DRAWS, "env A") != make_placeholder(
        "api.openai.com", "authorization", DRAWS, "env B")  # each secret its own


def test_decoys_skip_names_routes_use() -> None:
    decoys = make_decoys(DRAWS, ["AWS_ACCESS_KEY_ID"])
    assert "AWS_ACCESS_KEY_ID" not in decoys.env and decoys.env["AWS_SECRET_ACCESS_KEY"]
    assert decoys.aws_credentials_file.startswith("[default]\naws_access_key_id = AKIA")
    assert decoys.values()["~/.aws/credentials aws_access_key_id"] in decoys.aws_credentials_file


def test_the_scanner_names_what_it_finds() -> None:
    ph = make_placeholder("api.anthropic.com", "x-api-key", DRAWS)
    decoys = make_decoys(DRAWS)
    scanner = SecretScanner({"anthropic-api-key": (ph,)}, decoys.values())
    assert str(scanner.find(f"GET /?k={ph}".encode())) == "placeholder anthropic-api-key"
    dns_name = f"{ph.lower()}.exfil.example."
    assert str(scanner.find(dns_name)) == "placeholder anthropic-api-key"  # DNS folds case
    assert str(scanner.find(decoys.env["AWS_ACCESS_KEY_ID"].lower())) == "decoy AWS_ACCESS_KEY_ID"
    assert scanner.find(b"nothing here") is None
    assert ph not in repr(scanner)
    assert SecretScanner({}, {}).find("x") is None


def test_the_draws_are_a_fact_each_value_follows_from_the_seed_and_its_label() -> None:
    """The plan is a function of its facts: the same draws give the same values, other draws others, and
    every value is shaped as before (prefix, length, alphabet)."""
    same, other = Draws(DRAWS.seed), new_draws()
    assert make_placeholder("api.github.com", "authorization", same, "env GH_TOKEN") == make_placeholder(
        "api.github.com", "authorization", DRAWS, "env GH_TOKEN")
    assert make_placeholder("api.github.com", "authorization", other, "env GH_TOKEN") != make_placeholder(
        "api.github.com", "authorization", DRAWS, "env GH_TOKEN")
    assert make_decoys(same) == make_decoys(DRAWS) != make_decoys(other)
    from dejima.core.placeholders import placeholder_shaped

    assert placeholder_shaped(make_placeholder("example.internal", "x-key", other, "file ~/k"))
    decoys = make_decoys(other).env
    assert len(decoys["AWS_SECRET_ACCESS_KEY"]) == 40 and decoys["AWS_ACCESS_KEY_ID"].startswith("AKIA")
    assert DRAWS.seed.hex() not in repr(DRAWS)  # the seed is never printed
