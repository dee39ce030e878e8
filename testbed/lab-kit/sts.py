#!/usr/bin/env python3
"""Lab test tooling, not AWS: an STS endpoint that answers presigned GetCallerIdentity requests
and verifies their SigV4 signature itself.

aws-iam-authenticator replays a node's token (a presigned `GET /?Action=GetCallerIdentity...`
URL) to STS and trusts the identity STS returns. moto cannot answer presigned URLs (and enforces
no signatures at all), so the lab serves this instead, under the real STS host names
(`sts.amazonaws.com`, `sts.<region>.amazonaws.com`) with a certificate from the lab CA; the
authenticator reaches it through a private /etc/hosts. Every refusal the authenticator reports
for a tampered, forged, expired or foreign-cluster token is this verifier's.

Principals it knows: every lab instance (`<nodes>/*/instance.json`, the credentials the fake
IMDS issues, `imds.role_credentials`), identity `arn:aws:sts::<account>:assumed-role/<role>/
<instance-id>`; plus test principals from a JSON file (`--principals`, re-read on each request):
`{"<access key id>": {"secret": ..., "sessionToken": ..., "arn": ..., "userId": ...}}`.

What it checks, as STS does (docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request):
Action GetCallerIdentity, algorithm AWS4-HMAC-SHA256, a known access key and its session token,
a credential scope of the request's date, its region and `sts`, `host` among the signed headers,
X-Amz-Expires between 1 and 900 and X-Amz-Date at most 15 minutes old (STS ignores the expiry a
GetCallerIdentity URL names and honours it for 15 minutes, which is why `aws eks get-token`'s
60-second URLs serve the kubelet for 14 minutes: sigs.k8s.io/aws-iam-authenticator v0.7.2
pkg/token/token.go), and the signature over the canonical request rebuilt from what arrived
(query, the signed headers' values, empty payload).

Usage: sts.py --listen ADDR --port 443 --cert CRT --key KEY --nodes DIR [--principals FILE]
"""

from __future__ import annotations

import argparse
import datetime as dt
import glob
import hashlib
import hmac
import json
import os
import ssl
import sys
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote, unquote

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import imds  # noqa: E402  (the one home of the lab's instance credentials)

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
MAX_EXPIRES = 900
VALIDITY = dt.timedelta(minutes=15)


def principals(nodes: str, extra: str | None) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for path in glob.glob(os.path.join(nodes, "*", "instance.json")):
        try:
            with open(path, encoding="utf-8") as f:
                inst = json.load(f)
        except (OSError, ValueError):
            continue
        if not inst.get("role"):
            continue
        key, secret, session = imds.role_credentials(inst["instanceId"])
        out[key] = {
            "secret": secret,
            "sessionToken": session,
            "arn": f"arn:aws:sts::{inst['accountId']}:assumed-role/{inst['role']}/{inst['instanceId']}",
            "userId": f"AROALAB{inst['role'].upper()[:12]}:{inst['instanceId']}",
        }
    if extra and os.path.exists(extra):
        with open(extra, encoding="utf-8") as f:
            out.update(json.load(f))
    return out


def _sign(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _enc(text: str) -> str:
    return quote(text, safe="-_.~")


def verify(raw_query: str, headers: dict[str, str], known: dict[str, dict], now: dt.datetime) -> dict:
    """The caller's identity, or raises ValueError(code, message)."""
    pairs: list[tuple[str, str]] = []
    for part in raw_query.split("&") if raw_query else []:
        name, _, value = part.partition("=")
        pairs.append((unquote(name.replace("+", " ")), unquote(value.replace("+", " "))))
    params: dict[str, str] = {}
    for name, value in pairs:
        if name in params:
            raise ValueError("InvalidParameterValue", f"duplicate parameter {name}")
        params[name] = value
    if params.get("Action") != "GetCallerIdentity":
        raise ValueError("InvalidAction", "only GetCallerIdentity is served")
    if params.get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256":
        raise ValueError("IncompleteSignature", "X-Amz-Algorithm must be AWS4-HMAC-SHA256")
    for required in ("X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders", "X-Amz-Signature"):
        if required not in params:
            raise ValueError("IncompleteSignature", f"missing {required}")
    cred = params["X-Amz-Credential"].split("/")
    if len(cred) != 5 or cred[3] != "sts" or cred[4] != "aws4_request":
        raise ValueError("IncompleteSignature", "malformed credential scope")
    key_id, date, region = cred[0], cred[1], cred[2]
    who = known.get(key_id)
    if who is None:
        raise ValueError("InvalidClientTokenId", "The security token included in the request is invalid.")
    if params.get("X-Amz-Security-Token", "") != who.get("sessionToken", ""):
        raise ValueError("InvalidClientTokenId", "The security token included in the request is invalid.")
    amz_date = params["X-Amz-Date"]
    try:
        signed_at = dt.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
        expires = int(params["X-Amz-Expires"])
    except ValueError:
        raise ValueError("IncompleteSignature", "malformed X-Amz-Date or X-Amz-Expires") from None
    if date != amz_date[:8]:
        raise ValueError("SignatureDoesNotMatch", "credential date differs from X-Amz-Date")
    host = headers.get("host", "")
    host_region = host.split(".")[1] if host.count(".") >= 3 else "us-east-1"
    if region != host_region:
        raise ValueError("SignatureDoesNotMatch", f"credential scope region {region} is not this endpoint's {host_region}")
    if not 0 < expires <= MAX_EXPIRES:
        raise ValueError("IncompleteSignature", f"X-Amz-Expires {expires} is not within 1-{MAX_EXPIRES}")
    if now > signed_at + VALIDITY:
        raise ValueError("ExpiredToken", f"Signature expired: {amz_date} is more than 15 minutes before {now:%Y%m%dT%H%M%SZ}")
    if signed_at > now + dt.timedelta(minutes=5):
        raise ValueError("SignatureDoesNotMatch", "Signature not yet current")
    signed = params["X-Amz-SignedHeaders"].lower().split(";")
    if "host" not in signed or signed != sorted(signed):
        raise ValueError("SignatureDoesNotMatch", "host must be signed; signed headers sorted")
    canonical_headers = ""
    for name in signed:
        if name not in headers:
            raise ValueError("SignatureDoesNotMatch", f"signed header {name} is missing from the request")
        canonical_headers += f"{name}:{' '.join(headers[name].strip().split())}\n"
    query = sorted((_enc(n), _enc(v)) for n, v in pairs if n != "X-Amz-Signature")
    canonical_query = "&".join(f"{n}={v}" for n, v in query)
    scope = f"{date}/{region}/sts/aws4_request"
    key = _sign(_sign(_sign(_sign(("AWS4" + who["secret"]).encode(), date), region), "sts"), "aws4_request")
    for payload in (EMPTY_SHA256, "UNSIGNED-PAYLOAD"):
        canonical = "\n".join(["GET", "/", canonical_query, canonical_headers, ";".join(signed), payload])
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        expected = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
        if hmac.compare_digest(expected, params["X-Amz-Signature"]):
            return who
    raise ValueError(
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided.",
    )


def make_handler(nodes: str, extra: str | None, log):
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def do_GET(self):  # noqa: N802
            path, _, raw_query = self.path.partition("?")
            headers = {k.lower(): v for k, v in self.headers.items()}
            request_id = str(uuid.uuid4())
            try:
                if path != "/":
                    raise ValueError("InvalidAction", "unexpected path")
                who = verify(raw_query, headers, principals(nodes, extra), dt.datetime.now(dt.timezone.utc))
            except ValueError as e:
                code, message = e.args
                status = 400 if code in ("InvalidAction", "InvalidParameterValue") else 403
                body = {"Error": {"Code": code, "Message": message, "Type": "Sender"}, "RequestId": request_id}
                self.reply(status, body)
                with lock:
                    log.write(f"refused {code}: {message} (cluster header {headers.get('x-k8s-aws-id', '-')})\n")
                    log.flush()
                return
            account = who["arn"].split(":")[4]
            body = {
                "GetCallerIdentityResponse": {
                    "GetCallerIdentityResult": {"Account": account, "Arn": who["arn"], "UserId": who["userId"]},
                    "ResponseMetadata": {"RequestId": request_id},
                }
            }
            self.reply(200, body)
            with lock:
                log.write(f"answered {who['arn']} (cluster header {headers.get('x-k8s-aws-id', '-')})\n")
                log.flush()

        def reply(self, status: int, body: dict):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--port", type=int, default=443)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--nodes", required=True)
    ap.add_argument("--principals")
    args = ap.parse_args()
    server = ThreadingHTTPServer((args.listen, args.port), make_handler(args.nodes, args.principals, sys.stderr))
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(args.cert, args.key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    print(f"lab sts listening on {args.listen}:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
