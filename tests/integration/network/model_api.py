#!/usr/bin/env python3
"""model_api.py: a stand-in for a model provider's API, for the secrets proxy's end-to-end test
(tests/integration/secrets) and benchmark (tools/bench/secret_proxy.py). Standard library only.
    model_api.py NAME=ADDR:PORT[:CERT:KEY] ...
serves each listener (TLS when a certificate and key are given) and prints "ready" once all are
bound. Every path answers JSON with what the server received: {"server", "path", "headers"
(lower-case names, each value as the hex SHA-256 of what arrived: a value a client must not see,
such as a secret, is not sent back to it, and whatever the client stores stays free of it),
"body"}; but
    /stream   an SSE answer, chunked: "data: one", then, once /release was asked (by anyone, on
              any listener), "data: two", then the end: a client that has the first event before
              asking /release proves the answer streams through unbuffered;
    /release  lets the waiting /stream answers go on;
    /seen     {"<NAME>": requests seen by that listener (all paths but /seen)}.
"""
import hashlib
import json
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

release = threading.Condition()
released = [0]
seen = {}
seen_lock = threading.Lock()


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        if self.headers.get("Transfer-Encoding") == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                body += self.rfile.read(size)
                self.rfile.readline()
        return body

    def send_json(self, obj):
        out = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def answer(self):
        body = self.read_body()
        if self.path == "/seen":
            with seen_lock:
                return self.send_json(dict(seen))
        with seen_lock:
            seen[self.server.name] = seen.get(self.server.name, 0) + 1
        if self.path == "/release":
            with release:
                released[0] += 1
                release.notify_all()
            return self.send_json({"released": True})
        if self.path.startswith("/stream"):
            with release:
                mark = released[0]
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, data in enumerate([b"data: one\n\n", b"data: two\n\n"]):
                if i == 1:
                    with release:
                        release.wait_for(lambda: released[0] > mark, timeout=60)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        self.send_json({"server": self.server.name, "path": self.path,
                        "headers": {k.lower(): hashlib.sha256(v.encode()).hexdigest()
                                    for k, v in self.headers.items()},
                        "body": body.decode(errors="replace")})

    do_GET = do_POST = do_PUT = answer


def main():
    for spec in sys.argv[1:]:
        name, rest = spec.split("=", 1)
        parts = rest.split(":")
        srv = ThreadingHTTPServer((parts[0], int(parts[1])), Api)
        srv.daemon_threads = True
        srv.name = name
        if len(parts) == 4:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(parts[2], parts[3])
            srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes it


main()
