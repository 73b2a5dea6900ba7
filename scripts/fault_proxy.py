#!/usr/bin/env python3
"""An HTTP proxy in front of an S3 and IAM server (moto, for the Bucket tests) that names the
operation of every request, logs it, and fails the ones a test asks it to fail.

Usage: fault_proxy.py --upstream http://127.0.0.1:PORT --port PORT

Control endpoints (S3 bucket names cannot start with "_", so these never shadow a bucket):
  PUT    /__proxy/faults  JSON list of rules, replacing the current ones. A rule:
         {"operation": "CreateBucket", "times": 3, "status": 503, "code": "SlowDown",
          "message": "Please reduce your request rate.", "forward": false}
         "forward": true lets the request reach the server before the error is answered,
         so its effect happens and only its answer is lost (a crash after the call).
         "bare": true answers with no body, so no error code, as a gateway might.
         "params": {"PathPrefix": "/x/"} makes the rule match only IAM calls whose form
         parameters have those values.
         "delay": N holds the request N seconds before anything else; a rule with a delay
         and no "status" then passes the request on and answers as the server does (a
         slow call, to make a race happen in a known order).
  GET    /__proxy/faults  the rules with the times each has left
  GET    /__proxy/calls   every call since the last reset: [{"service", "operation",
         "status", "user"}] (user: the UserName of an IAM call, or null), in order
  DELETE /__proxy/calls   forget the calls

Only the standard library, so it runs on the moto virtual environment's interpreter.
"""

import argparse
import http.client
import json
import re
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-authenticate"}

# S3 sub-resources, by query key, that name a bucket operation on their own.
S3_SUBRESOURCES = ["tagging", "versioning", "policy", "location", "versions", "delete",
                   "lifecycle", "encryption", "acl", "cors", "uploads", "publicAccessBlock"]
# Sub-resources whose operations S3 names otherwise than `<Verb>Bucket<Sub>`.
S3_NAMED = {
    ("GET", "lifecycle"): "GetBucketLifecycleConfiguration",
    ("PUT", "lifecycle"): "PutBucketLifecycleConfiguration",
    ("DELETE", "lifecycle"): "DeleteBucketLifecycle",
    ("GET", "publicAccessBlock"): "GetPublicAccessBlock",
    ("PUT", "publicAccessBlock"): "PutPublicAccessBlock",
    ("DELETE", "publicAccessBlock"): "DeletePublicAccessBlock",
}


def service_of(headers):
    """The signing service in the SigV4 credential scope: "s3" or "iam"."""
    match = re.search(r"Credential=[^/]+/[^/]+/[^/]+/([^/]+)/", headers.get("Authorization", ""))
    return match.group(1) if match else "unknown"


def s3_operation(method, path, query):
    """The S3 operation of a path-style request."""
    parts = [part for part in path.split("/") if part]
    if not parts:
        return "ListBuckets"
    keys = set(query)
    if len(parts) == 1:
        for sub in S3_SUBRESOURCES:
            if sub in keys:
                verb = {"GET": "Get", "PUT": "Put", "DELETE": "Delete", "POST": ""}[method]
                if sub == "versions":
                    return "ListObjectVersions"
                if sub == "delete":
                    return "DeleteObjects"
                if sub == "location":
                    return "GetBucketLocation"
                if (method, sub) in S3_NAMED:
                    return S3_NAMED[(method, sub)]
                return f"{verb}Bucket{sub.capitalize()}"
        if method == "GET":
            return "ListObjectsV2" if query.get("list-type") == ["2"] else "ListObjects"
        return {"PUT": "CreateBucket", "HEAD": "HeadBucket", "DELETE": "DeleteBucket"}.get(
            method, f"{method}Bucket")
    return {"PUT": "PutObject", "GET": "GetObject", "HEAD": "HeadObject",
            "DELETE": "DeleteObject"}.get(method, f"{method}Object")


def error_body(service, code, message):
    if service == "iam":
        return (f'<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><Error>'
                f"<Type>Sender</Type><Code>{code}</Code><Message>{message}</Message></Error>"
                f"<RequestId>fault-proxy</RequestId></ErrorResponse>").encode()
    return (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>{message}</Message><RequestId>fault-proxy</RequestId></Error>").encode()


class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.rules = []
        self.calls = []

    def take_fault(self, operation, params):
        """The first rule for `operation` (and its "params", if it names any) with times left,
        used once."""
        with self.lock:
            for rule in self.rules:
                wanted = rule.get("params", {})
                matches = all(params.get(name) == value for name, value in wanted.items())
                if rule["operation"] == operation and matches and rule.get("times", 1) > 0:
                    rule["times"] = rule.get("times", 1) - 1
                    return dict(rule)
        return None

    def record(self, service, operation, status, user=None):
        with self.lock:
            self.calls.append({"service": service, "operation": operation, "status": status,
                               "user": user})


def handler(upstream, state):
    target = urllib.parse.urlsplit(upstream)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            self.handle_any()

        do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

        def read_body(self):
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass
                        return body
                    body += self.rfile.read(size)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))

        def answer(self, status, body, headers=()):
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def control(self, body):
            if self.path == "/__proxy/faults" and self.command == "PUT":
                with state.lock:
                    state.rules = json.loads(body or b"[]")
                return self.answer(204, b"")
            if self.path == "/__proxy/faults" and self.command == "GET":
                with state.lock:
                    return self.answer(200, json.dumps(state.rules).encode())
            if self.path == "/__proxy/calls" and self.command == "GET":
                with state.lock:
                    return self.answer(200, json.dumps(state.calls).encode())
            if self.path == "/__proxy/calls" and self.command == "DELETE":
                with state.lock:
                    state.calls = []
                return self.answer(204, b"")
            return self.answer(404, b"")

        def forward(self, body):
            connection = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
            headers = {name: value for name, value in self.headers.items()
                       if name.lower() not in HOP_BY_HOP and name.lower() != "expect"}
            headers["Content-Length"] = str(len(body))
            connection.request(self.command, self.path, body=body, headers=headers)
            response = connection.getresponse()
            data = response.read()
            connection.close()
            return response.status, data, response.getheaders()

        def handle_any(self):
            body = self.read_body()
            if self.path.startswith("/__proxy/"):
                return self.control(body)
            service = service_of(self.headers)
            split = urllib.parse.urlsplit(self.path)
            user, params = None, {}
            if service == "iam":
                form = urllib.parse.parse_qs(body.decode(errors="replace"))
                params = {name: values[0] for name, values in form.items()}
                operation = params.get("Action", "Unknown")
                user = params.get("UserName")
            else:
                query = urllib.parse.parse_qs(split.query, keep_blank_values=True)
                operation = s3_operation(self.command, split.path, query)
            fault = state.take_fault(operation, params)
            if fault is not None and "delay" in fault:
                time.sleep(float(fault["delay"]))
                if "status" not in fault:
                    fault = None
            if fault is None or fault.get("forward"):
                try:
                    status, data, headers = self.forward(body)
                except OSError as error:
                    state.record(service, operation, 502, user)
                    return self.answer(502, str(error).encode())
            if fault is not None:
                status = fault.get("status", 500)
                code = fault.get("code", "InternalError")
                data = error_body(service, code, fault.get("message", "injected by fault_proxy.py"))
                headers = [("Content-Type", "text/xml")]
                if fault.get("bare"):
                    data, headers = b"", []
            state.record(service, operation, status, user)
            self.answer(status, data, headers)

    return Handler


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler(args.upstream, State()))
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
