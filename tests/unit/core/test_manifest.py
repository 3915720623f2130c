"""Manifest parsing: what a valid file gives, and the exact message for each kind of mistake."""

import pytest

from dejima.core.manifest import Manifest, ManifestError, parse_manifest

SOURCE = "/cfg/dejima/harnesses/my-agent.toml"
GOOD = """
schema = 1
description = "an agent"
[network]
allow = ["api.example.com:443", "*.cdn.example.com"]
deny = ["telemetry.example.com"]
deny_reasons = { "telemetry.example.com" = "telemetry is off" }
[env]
AGENT_TELEMETRY = "0"
[[credentials]]
name = "example-key"
upstream = "https://api.example.com"
header = "x-api-key"
scheme = "raw"
source = { env = "EXAMPLE_API_KEY" }
placeholder_env = "EXAMPLE_API_KEY"
[image]
packages = ["nodejs", "npm"]
install = ["npm install -g example-agent"]
[[caches]]
path = "/home/dejima/.cache/example"
[audit]
watch = [".example/config.json"]
[harness]
command = ["example"]
apis = ["anthropic"]
default_backend = "anthropic"
"""


def parse(text: str, kind: str = "harnesses", name: str = "my-agent") -> Manifest:
    return parse_manifest(text, kind, name, SOURCE)


def error(text: str, kind: str = "harnesses") -> str:
    with pytest.raises(ManifestError) as caught:
        parse(text, kind)
    return caught.value.message + "\n" + (caught.value.hint or "")


def test_a_full_manifest_parses_into_values() -> None:
    m = parse(GOOD)
    assert (m.kind, m.name, m.ref) == ("harnesses", "my-agent", "harnesses/my-agent")
    assert m.allow == ("api.example.com:443", "*.cdn.example.com")
    assert m.deny_reasons == {"telemetry.example.com": "telemetry is off"}
    assert m.credentials[0].source == ("env", ("EXAMPLE_API_KEY",))
    assert m.command == ("example",) and m.apis == ("anthropic",) and m.default_backend == "anthropic"
    assert m.caches == ("/home/dejima/.cache/example",)


@pytest.mark.parametrize(("mutation", "expected"), [
    (("schema = 1\n", ""), f"{SOURCE}: 'schema' is missing"),
    (("schema = 1", "schema = 2"), f"{SOURCE}: 'schema' is 2, but this dejima reads schema 1"),
    (("[env]", "[envv]"),
     f"{SOURCE}: 'envv' is not a known key\ndid you mean 'env'? known keys in a harness manifest: schema, "),
    (("allow = [", "alow = ["), f"{SOURCE}: 'network.alow' is not a known key\ndid you mean 'allow'?"),
    (('allow = ["api.example.com:443", "*.cdn.example.com"]', 'allow = ["*.com"]'),
     f"{SOURCE}: 'network.allow[0]' is not a valid egress entry ('*.com'): a wildcard needs at least two labels"),
    (('allow = ["api.example.com:443", "*.cdn.example.com"]', 'allow = "api.example.com"'),
     f"{SOURCE}: 'network.allow' must be a list of egress entries, not str 'api.example.com'\nnetwork.allow: "),
    (('scheme = "raw"', 'scheme = "Digest"'),
     f"{SOURCE}: 'credentials[0].scheme' must be one of 'Bearer', 'token', 'Basic', 'raw', 'aws-sigv4', not 'Digest'"),
    (('upstream = "https://api.example.com"', 'upstream = "http://api.example.com"'),
     f"{SOURCE}: 'credentials[0].upstream' must be an https:// URL"),
    (('source = { env = "EXAMPLE_API_KEY" }', 'source = { env = "A", file = "b" }'),
     f"{SOURCE}: 'credentials[0].source' must name exactly one of env, file, command, claude_login or aws"),
    (('scheme = "raw"', 'scheme = "raw"\nusername = "oauth2"'),
     f"{SOURCE}: 'credentials[0].username' only goes with scheme = \"Basic\""),
    (('AGENT_TELEMETRY = "0"', 'EXAMPLE_TOKEN = "sk-live-123"'),
     f"{SOURCE}: 'env.EXAMPLE_TOKEN' looks like a secret, and manifests hold none"),
    (('apis = ["anthropic"]', 'apis = ["claude"]'),
     f"{SOURCE}: 'harness.apis[0]' must be one of 'anthropic', 'openai'"),
    (('command = ["example"]', 'command = []'), f"{SOURCE}: 'harness.command' must not be empty"),
    (('path = "/home/dejima/.cache/example"', 'path = "cache"'), f"{SOURCE}: 'caches[0].path' must be an absolute"),
    (('watch = [".example/config.json"]', 'watch = ["../outside"]'),
     f"{SOURCE}: 'audit.watch[0]' must be a path inside the workspace"),
    (('deny_reasons = { "telemetry.example.com" = "telemetry is off" }', 'deny_reasons = { "x.example" = "r" }'),
     f"{SOURCE}: 'network.deny_reasons.\"x.example\"' is a reason for an entry that is not in deny"),
    (("[[caches]]", "[caches]"), f"{SOURCE}: 'caches' must be an array of tables, written [[caches]], not table"),
    (('description = "an agent"', "description = 1"), f"{SOURCE}: 'description' must be a string"),
    (("[harness]", "[harness"), f"{SOURCE}:24:9: not valid TOML"),
])
def test_each_mistake_has_its_message(mutation: tuple[str, str], expected: str) -> None:
    old, new = mutation
    assert old in GOOD
    assert expected in error(GOOD.replace(old, new, 1))


def test_sections_belong_to_their_kinds() -> None:
    text = 'schema = 1\ndescription = "x"\n[backend]\napi = "openai"\n'
    assert "'backend' does not belong in a harness manifest" in error(text + '[harness]\ncommand=["x"]\napis=[]\n')
    assert "'harness' is missing" in error('schema = 1\ndescription = "x"\n')
    assert parse(text, "backends").api == "openai"
    assert "'detect' does not belong" in error(text + '[detect]\nfiles = ["x"]\n', "backends")


def test_file_names_must_be_kebab_case() -> None:
    with pytest.raises(ManifestError, match="is not kebab-case"):
        parse_manifest(GOOD, "harnesses", "My_Agent", SOURCE)


SIGV4 = """
schema = 1
description = "a signed backend"
[[credentials]]
name = "aws-runtime"
upstream = "https://bedrock-runtime.eu-west-3.amazonaws.com"
header = "Authorization"
scheme = "aws-sigv4"
aws_service = "bedrock"
source = { aws = "default" }
[backend]
api = "bedrock"
"""


def test_a_sigv4_route_names_its_service_and_the_aws_source() -> None:
    route = parse(SIGV4, "backends", "signed").credentials[0]
    assert (route.scheme, route.aws_service, route.source) == ("aws-sigv4", "bedrock", ("aws", ("default",)))


@pytest.mark.parametrize(("mutation", "expected"), [
    (('aws_service = "bedrock"\n', ""), "'credentials[0].aws_service' is missing"),
    (('source = { aws = "default" }', 'source = { env = "AWS_SECRET_ACCESS_KEY" }'),
     "'credentials[0].source' must be { aws = \"profile\" } with scheme aws-sigv4"),
    (('scheme = "aws-sigv4"', 'scheme = "raw"'), "'credentials[0].aws_service' only goes with scheme = \"aws-sigv4\""),
    (("bedrock-runtime.eu-west-3.amazonaws.com", "bedrock.example.com"), "does not name an AWS region"),
    (('header = "Authorization"', 'header = "x-api-key"'), "must be \"Authorization\" with scheme aws-sigv4"),
])
def test_sigv4_mistakes_have_their_message(mutation: tuple[str, str], expected: str) -> None:
    old, new = mutation
    assert old in SIGV4
    assert expected in error(SIGV4.replace(old, new, 1), "backends")
