#!/usr/bin/env python3
"""A fake EC2 instance metadata service that behaves like IMDS with httpTokens=required.

Started by run-userdata.sh inside the sandbox's own network namespace, bound to
169.254.169.254:80 on that namespace's loopback. Standard library only.

IMDSv2 as EC2 implements it:
  PUT /latest/api/token with X-aws-ec2-metadata-token-ttl-seconds (1..21600) -> a token;
      without a valid TTL header -> 400; with X-Forwarded-For -> 403 (EC2 rejects proxied PUTs).
  GET /latest/meta-data/... needs X-aws-ec2-metadata-token = an unexpired token: without one
      (an IMDSv1 request) or with an unknown one -> 401, the body EC2 sends.

Every request is logged as one JSON object per line to --log:
  {"method": "GET", "path": "/latest/meta-data/instance-id", "token": "valid", "status": 200}
where "token" is "missing", "valid" or "invalid" (for a PUT: "issued" when a token was
returned, else "none").
"""

import argparse
import json
import os
import secrets
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# What EC2's IMDS answers to an IMDSv1 request when IMDSv2 is required.
UNAUTHORIZED_BODY = """<?xml version="1.0" encoding="iso-8859-1"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN"
\t"http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
 <head>
  <title>401 - Unauthorized</title>
 </head>
 <body>
  <h1>401 - Unauthorized</h1>
 </body>
</html>
"""

TOKEN_HEADER = "X-aws-ec2-metadata-token"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"


class State:
    def __init__(self, log_path, metadata):
        self.log_path = log_path
        self.metadata = metadata
        self.tokens = {}  # token -> expiry (monotonic seconds)
        self.lock = threading.Lock()

    def issue(self, ttl):
        token = secrets.token_urlsafe(40)
        with self.lock:
            self.tokens[token] = time.monotonic() + ttl
        return token

    def check(self, token):
        if token is None:
            return "missing"
        with self.lock:
            expiry = self.tokens.get(token)
        if expiry is not None and expiry > time.monotonic():
            return "valid"
        return "invalid"

    def log(self, entry):
        line = json.dumps(entry, sort_keys=True) + "\n"
        with self.lock:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(line)


def make_handler(state):
    class Handler(BaseHTTPRequestHandler):
        server_version = "EC2ws"
        sys_version = ""

        def log_message(self, format, *args):  # noqa: A002 - http.server's signature
            pass  # requests go to the JSON log only

        def reply(self, status, body, token_state, content_type="text/plain", headers=()):
            state.log(
                {
                    "method": self.command,
                    "path": self.path,
                    "token": token_state,
                    "status": status,
                }
            )
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def do_PUT(self):
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            if self.path != "/latest/api/token":
                self.reply(403, "Forbidden\n", "none")
                return
            if self.headers.get("X-Forwarded-For") is not None:
                self.reply(403, "Forbidden\n", "none")
                return
            ttl_text = self.headers.get(TTL_HEADER)
            try:
                ttl = int(ttl_text)
            except (TypeError, ValueError):
                ttl = 0
            if not 1 <= ttl <= 21600:
                self.reply(400, "Missing or Invalid Parameters\n", "none")
                return
            token = state.issue(ttl)
            self.reply(200, token, "issued", headers=[(TTL_HEADER, str(ttl))])

        def do_GET(self):
            token_state = state.check(self.headers.get(TOKEN_HEADER))
            if token_state != "valid":
                self.reply(401, UNAUTHORIZED_BODY, token_state, content_type="text/html")
                return
            prefix = "/latest/meta-data/"
            if not self.path.startswith(prefix):
                self.reply(404, "Not Found\n", token_state)
                return
            key = self.path[len(prefix):]
            if key == "":
                listing = sorted({k.split("/")[0] + ("/" if "/" in k else "") for k in state.metadata})
                self.reply(200, "\n".join(listing), token_state)
                return
            value = state.metadata.get(key)
            if value is None:
                self.reply(404, "Not Found\n", token_state)
                return
            self.reply(200, value, token_state)

        def do_POST(self):
            self.reply(405, "Method Not Allowed\n", "none")

        do_DELETE = do_POST

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="169.254.169.254")
    parser.add_argument("--port", type=int, default=80)
    parser.add_argument("--log", required=True, help="JSON-lines request log")
    parser.add_argument("--ready", help="file created once the server listens")
    parser.add_argument("--instance-id", default=os.environ.get("FAKE_INSTANCE_ID", "i-0123456789abcdef0"))
    parser.add_argument("--availability-zone", default=os.environ.get("FAKE_AZ", "us-east-1b"))
    args = parser.parse_args()

    az = args.availability_zone
    region = az[:-1] if az and az[-1].isalpha() else az
    metadata = {
        "instance-id": args.instance_id,
        "placement/availability-zone": az,
        "placement/region": region,
        "local-ipv4": "10.0.1.77",
        "local-hostname": "ip-10-0-1-77.ec2.internal",
        "instance-type": "g6.xlarge",
    }
    state = State(args.log, metadata)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(state))
    server.daemon_threads = True
    if args.ready:
        with open(args.ready, "w", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
