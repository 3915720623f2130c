"""An independent SigV4 verifier for tests: botocore (a test-only dependency) recomputes the
signature of a request as it arrived, from the headers its Authorization header says were signed."""

from __future__ import annotations

from collections.abc import Sequence


def botocore_signature(method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes, signed: Sequence[str],
                       timestamp: str, key_id: str, secret: str, token: str | None, region: str,
                       service: str) -> str:
    """The signature botocore computes for this request, signing exactly the ``signed`` header names."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    wanted = set(signed)
    request = AWSRequest(method=method, url=url, data=body,
                         headers={k: v for k, v in headers if k.lower() in wanted})
    request.context["timestamp"] = timestamp
    auth = SigV4Auth(Credentials(key_id, secret, token), service, region)
    canonical = auth.canonical_request(request)
    return str(auth.signature(auth.string_to_sign(request, canonical), request))


def verify(method: str, url: str, headers: Sequence[tuple[str, str]], body: bytes, key_id: str, secret: str,
           token: str | None, region: str, service: str) -> str:
    """'' when the request carries a valid SigV4 signature by ``key_id``/``secret``; else what is wrong."""
    values = {k.lower(): v for k, v in headers}
    authorization = values.get("authorization", "")
    if not authorization.startswith("AWS4-HMAC-SHA256 "):
        return f"no SigV4 Authorization header: {authorization[:40]!r}"
    fields = dict(part.strip().split("=", 1) for part in authorization[len("AWS4-HMAC-SHA256 "):].split(","))
    credential = fields["Credential"].split("/")
    if credential[0] != key_id:
        return f"signed by another key id {credential[0]!r}"
    if credential[2:4] != [region, service]:
        return f"scope {credential[2:4]} is not {[region, service]}"
    if token is not None and values.get("x-amz-security-token") != token:
        return "the session token is missing or wrong"
    expected = botocore_signature(method, url, headers, body, fields["SignedHeaders"].split(";"),
                                  values.get("x-amz-date", ""), key_id, secret, token, region, service)
    return "" if expected == fields["Signature"] else "signature mismatch"
