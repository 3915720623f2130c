"""SigV4 signing (dejima.core.sigv4) against AWS's published Signature Version 4 test suite and,
as an independent verifier, botocore's own signer on Bedrock-shaped requests."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from dejima.core.secret import Secret
from dejima.core.sigv4 import (
    AwsKeys,
    SigningScope,
    canonical_path,
    canonical_request,
    parse_authorization,
    payload_sha256,
    sign,
    signature,
    signed_names,
)
from tests.awsverify import botocore_signature

EXAMPLE_KEYS = AwsKeys("AKIDEXAMPLE", Secret("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"))
EXAMPLE_SCOPE = SigningScope("us-east-1", "service")
EXAMPLE_TIME = datetime(2015, 8, 30, 12, 36, 0, tzinfo=timezone.utc)
SUITE_TOKEN = "6e86291e8372ff2a2260956d9b8aae1d763fbf315fa00fa31553b73ebf194267"  # get-vanilla-with-session-token

# AWS Signature Version 4 Test Suite (Apache-2.0, Copyright Amazon.com, Inc. or its affiliates), as
# botocore ships it in tests/unit/auth/aws4_testsuite: (case, the .req file, the .authz signature).
SUITE = [
    ('get-header-key-duplicate',
     'GET / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'My-Header1:value2\n'
     'My-Header1:value2\n'
     'My-Header1:value1\n'
     'X-Amz-Date:20150830T123600Z',
     'c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea'),
    ('get-header-value-multiline',
     'GET / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'My-Header1:value1\n'
     '  value2\n'
     '     value3\n'
     'X-Amz-Date:20150830T123600Z',
     'cfd34249e4b1c8d6b91ef74165d41a32e5fab3306300901bb65a51a73575eefd'),
    ('get-header-value-order',
     'GET / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'My-Header1:value4\n'
     'My-Header1:value1\n'
     'My-Header1:value3\n'
     'My-Header1:value2\n'
     'X-Amz-Date:20150830T123600Z',
     '08c7e5a9acfcfeb3ab6b2185e75ce8b1deb5e634ec47601a50643f830c755c01'),
    ('get-header-value-trim',
     'GET / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'My-Header1: value1\n'
     'My-Header2: "a   b   c"\n'
     'X-Amz-Date:20150830T123600Z',
     'acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736'),
    ('get-unreserved',
     'GET /-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '07ef7494c76fa4850883e2b006601f940f8a34d404d0cfa977f52a65bbf5f24f'),
    ('get-utf8',
     'GET /ሴ HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85'),
    ('get-vanilla-empty-query-key',
     'GET /?Param1=value1 HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     'a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb'),
    ('get-vanilla-query-order-encoded',
     'GET /?Param-3=Value3&Param=Value2&%E1%88%B4=Value1 HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z\n',
     '371d3713e185cc334048618a97f809c9ffe339c62934c032af5a0e595648fcac'),
    ('get-vanilla-query-order-key-case',
     'GET /?Param2=value2&Param1=value1 HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     'b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500'),
    ('get-vanilla-query-order-key',
     'GET /?Param1=value2&Param1=Value1 HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     'eedbc4e291e521cf13422ffca22be7d2eb8146eecf653089df300a15b2382bd1'),
    ('get-vanilla-query-order-value',
     'GET /?Param1=value2&Param1=value1 HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694'),
    ('get-vanilla-query-unreserved',
     'GET /?-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz=-._~0123456789ABC'
     'DEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197'),
    ('get-vanilla-query',
     'GET / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31'),
    ('get-vanilla-utf8-query',
     'GET /?ሴ=bar HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '2cdec8eed098649ff3a119c94853b13c643bcf08f8b0a1d91e12c9027818dd04'),
    ('get-vanilla-with-session-token',
     'GET / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8'),
    ('get-vanilla',
     'GET / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31'),
    ('get-relative-relative',
     'GET /example1/example2/../.. HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31'),
    ('get-relative',
     'GET /example/.. HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31'),
    ('get-slash-dot-slash',
     'GET /./ HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31'),
    ('get-slash-pointless-dot',
     'GET /./example HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     'ef75d96142cf21edca26f06005da7988e4f8dc83a165a80865db7089db637ec5'),
    ('get-slash',
     'GET // HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31'),
    ('get-slashes',
     'GET //example// HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '9a624bd73a37c9a373b5312afbebe7a714a789de108f0bdfe846570885f57e84'),
    ('get-space',
     'GET /example space/ HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '652487583200325589f1fba4c7e578f72c47cb61beeca81406b39ddec1366741'),
    ('get-special-character',
     'GET /example/$delete HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z\n',
     'a853c9b21b528b19643d00910d35b83a10c366a10833ceefb45edd6c80e40f27'),
    ('post-header-key-case',
     'POST / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b'),
    ('post-header-key-sort',
     'POST / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'My-Header1:value1\n'
     'X-Amz-Date:20150830T123600Z',
     'c5410059b04c1ee005303aed430f6e6645f61f4dc9e1461ec8f8916fdf18852c'),
    ('post-header-value-case',
     'POST / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'My-Header1:VALUE1\n'
     'X-Amz-Date:20150830T123600Z',
     'cdbc9802e29d2942e5e10b5bccfdd67c5f22c7c4e8ae67b53629efa58b974b7d'),
    ('post-sts-header-after',
     'POST / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b'),
    ('post-sts-header-before',
     'POST / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z\n'
     'X-Amz-Security-Token:AQoDYXdzEPT//////////wEXAMPLEtc764bNrC9SAPBSM22wDOk4x4HIZ8j4FZTwdQWLW'
     'sKWHGBuFqwAeMicRXmxfpSPfIeoIYRqTflfKD8YUuwthAx7mSEI/qkPpKPi/kMcGdQrmGdeehM4IC1NtBmUpp2wUE8'
     'phUZampKsburEDy0KPkyQDYwT7WZ0wq5VSXDvp75YU9HFvlRd8Tx6q6fE8YQcHNVXAkiY9q6d+xo0rKwT38xVqr7ZD'
     '0u0iPPkUL64lIZbqBAz+scqKmlzm8FDrypNC9Yjc8fPOLn9FX9KSYvKTr4rvx3iSIlTJabIQwj2ICCR/oLxBA==',
     '85d96828115b5dc0cfc3bd16ad9e210dd772bbebba041836c64533a82be05ead'),
    ('post-vanilla-empty-query-value',
     'POST /?Param1=value1 HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11'),
    ('post-vanilla-query',
     'POST /?Param1=value1 HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11'),
    ('post-vanilla',
     'POST / HTTP/1.1\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z',
     '5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b'),
    ('post-x-www-form-urlencoded-parameters',
     'POST / HTTP/1.1\n'
     'Content-Type:application/x-www-form-urlencoded; charset=utf8\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z\n'
     '\n'
     'Param1=value1',
     '1a72ec8f64bd914b0e42e42607c7fbce7fb2c7465f63e3092b3b0d39fa77a6fe'),
    ('post-x-www-form-urlencoded',
     'POST / HTTP/1.1\n'
     'Content-Type:application/x-www-form-urlencoded\n'
     'Host:example.amazonaws.com\n'
     'X-Amz-Date:20150830T123600Z\n'
     '\n'
     'Param1=value1',
     'ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a'),
]


def _parse(raw: str) -> tuple[str, str, list[tuple[str, str]], bytes]:
    """A .req file: method, target, headers (folded lines joined, as the suite means them), body."""
    head, _, body = raw.partition("\n\n")
    lines = head.split("\n")
    method, target, _version = lines[0].split(" ") if lines[0].count(" ") == 2 else (
        lines[0].split(" ", 1)[0], lines[0].split(" ", 1)[1].rsplit(" ", 1)[0], "")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if line[:1] in (" ", "\t") and headers:
            headers[-1] = (headers[-1][0], headers[-1][1] + "\n" + line)
        elif line:
            name, _, value = line.partition(":")
            headers.append((name, value))
    return method, target, headers, body.encode()


@pytest.mark.parametrize(("case", "raw", "expected"), SUITE, ids=[c[0] for c in SUITE])
def test_the_aws_sigv4_test_suite(case: str, raw: str, expected: str) -> None:
    method, target, headers, body = _parse(raw)
    if case == "get-vanilla-with-session-token":
        headers.append(("X-Amz-Security-Token", SUITE_TOKEN))
    names = signed_names(headers, sign_all=True)
    canonical = canonical_request(method, target, headers, names, payload_sha256(body))
    assert signature(EXAMPLE_KEYS.secret_access_key, EXAMPLE_SCOPE, "20150830T123600Z", canonical) == expected


def test_sign_writes_the_suites_authorization_header() -> None:
    added = sign(EXAMPLE_SCOPE, EXAMPLE_KEYS, "GET", "/", [("Host", "example.amazonaws.com")],
                 payload_sha256(b""), EXAMPLE_TIME)
    assert added == [("X-Amz-Date", "20150830T123600Z"), (
        "Authorization", "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
                         "SignedHeaders=host;x-amz-date, "
                         "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")]


def test_temporary_keys_sign_their_session_token() -> None:
    keys = AwsKeys(EXAMPLE_KEYS.access_key_id, EXAMPLE_KEYS.secret_access_key, Secret(SUITE_TOKEN))
    added = dict(sign(EXAMPLE_SCOPE, keys, "GET", "/", [("Host", "example.amazonaws.com")], payload_sha256(b""),
                      EXAMPLE_TIME))
    assert added["X-Amz-Security-Token"] == SUITE_TOKEN
    assert added["Authorization"].endswith(
        "SignedHeaders=host;x-amz-date;x-amz-security-token, "
        "Signature=07ec1639c89043aa0e3e2de82b96708f198cceab042d4a97044c66dd9f74e7f8")


def test_a_request_that_still_carries_a_signature_is_not_signed_again() -> None:
    with pytest.raises(ValueError):
        sign(EXAMPLE_SCOPE, EXAMPLE_KEYS, "GET", "/", [("Host", "h"), ("X-Amz-Date", "x")], "", EXAMPLE_TIME)


def test_a_path_encoded_on_the_wire_is_encoded_again() -> None:
    # Bedrock model ids hold ':' (sent as %3A); AWS canonicalises non-S3 paths by encoding them once more.
    assert canonical_path("/model/anthropic.claude-v2%3A1/invoke") == "/model/anthropic.claude-v2%253A1/invoke"
    assert canonical_path("") == "/" and canonical_path("//a/./b/../c/") == "/a/c/"


BEDROCK_CASES = [
    ("POST", "/model/us.anthropic.claude-sonnet-4-20250514-v1%3A0/invoke-with-response-stream", "",
     [("Content-Type", "application/json"), ("Accept", "application/vnd.amazon.eventstream")],
     b'{"anthropic_version":"bedrock-2023-05-31","max_tokens":16,"messages":[]}'),
    ("GET", "/inference-profiles", "maxResults=100&typeEquals=SYSTEM_DEFINED", [], b""),
    ("GET", "/foundation-models", "byProvider=anthropic&nextToken=a%2Fb%3D%3D", [("X-Amz-User-Agent", "x/1")], b""),
    ("POST", "/model/m/converse", "", [("Content-Type", "application/json"), ("X-Amz-Meta-A", "  two  spaces ")],
     "{\"text\": \"caf\u00e9 \u2603\"}".encode()),
]


@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzEXAMPLEtoken/with+slashes=="])
@pytest.mark.parametrize(("method", "path", "query", "extra", "body"), BEDROCK_CASES)
def test_signatures_match_botocore(method: str, path: str, query: str, extra: list[tuple[str, str]], body: bytes,
                                   token: str | None) -> None:
    keys = AwsKeys("AKIAIOSFODNN7EXAMPLE", Secret("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
                   Secret(token) if token else None)
    scope = SigningScope("eu-west-3", "bedrock")
    host = "bedrock-runtime.eu-west-3.amazonaws.com"
    target = path + ("?" + query if query else "")
    headers = [("Host", host), *extra]
    added = sign(scope, keys, method, target, headers, payload_sha256(body), datetime.now(timezone.utc))
    presented = parse_authorization(dict(added)["Authorization"])
    assert presented is not None and presented.access_key_id == keys.access_key_id
    expected = botocore_signature(method, f"https://{host}{target}", [*headers, *added], body,
                                  presented.signed_headers, dict(added)["X-Amz-Date"], keys.access_key_id,
                                  keys.secret_access_key.reveal(), token, scope.region, scope.service)
    assert presented.signature == expected


def test_parse_authorization_reads_what_an_sdk_sends_and_nothing_else() -> None:
    value = ("AWS4-HMAC-SHA256 Credential=AKIAPLACEHOLDER00001/20260101/us-east-1/bedrock/aws4_request, "
             "SignedHeaders=host;x-amz-date, Signature=" + "0" * 64)
    parsed = parse_authorization(value)
    assert parsed is not None
    assert (parsed.access_key_id, parsed.region, parsed.service, parsed.signed_headers) == (
        "AKIAPLACEHOLDER00001", "us-east-1", "bedrock", ("host", "x-amz-date"))
    assert parse_authorization("Bearer abc") is None
    assert parse_authorization(value.replace("Signature=" + "0" * 64, "Signature=zz")) is None
