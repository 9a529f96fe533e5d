#!/usr/bin/python3
# secrets_agent.py: the agent of the secrets proxy's end-to-end test (secrets_proxy.test.mjs),
# run by the test image's python3 (standard library only). It speaks the agent protocol and calls
# HTTP(S) services the way a model SDK does, with its secrets' placeholders from the environment,
# and with Python's default TLS context: it trusts sbx's proxy through SSL_CERT_FILE (the image's
# CA bundle with the installation CA appended), as an unmodified SDK would.
#
# A message body {"steps": [STEP, ...]} says which requests to make, in order; each STEP is
#   {"host": "api.model.test", "addr": "11.11.11.1", "port": 443, "method": "POST",
#    "path": "/v1/messages", "headers": {"x-api-key": "$MODEL_KEY"}, "body": "...",
#    "stream": true}
# where "$NAME" in a header value is the environment variable NAME (the placeholder), "addr" is
# dialled with "host" as the TLS server name and Host (the test world has no DNS), and "stream"
# reads an SSE answer chunk by chunk: the first chunk, then a request to /release on the same
# host, then the rest; the chunks come back in the order they were read. The reply holds each
# step's status and body (or chunks), and the environment as the agent sees it (with
# /proc/self/environ), so the test can check that no secret value is in it.
#
# A pre-started agent (the App's prestart) makes the requests of the steps in its environment's
# INIT_STEPS (a JSON list, set in the App's env) while it initialises, before it says
# {"type":"ready"}, as one whose SDK checks its model API at start; each reply then holds their
# results as "init". The context line of its Session (a line of type "context") is skipped.
import http.client
import json
import os
import re
import socket
import ssl
import sys


def connect(step):
    port = step.get("port", 443)
    raw = socket.create_connection((step["addr"], port), 30)
    if port == 443:
        raw = ssl.create_default_context().wrap_socket(raw, server_hostname=step["host"])
    c = http.client.HTTPConnection(step["host"], port, timeout=30)
    c.sock = raw
    return c


def chunk(fp):
    size = int(fp.readline().split(b";")[0], 16)
    data = fp.read(size) if size else b""
    fp.readline()
    return data.decode()


def run(step):
    headers = {k: re.sub(r"\$([A-Z_][A-Z0-9_]*)", lambda m: os.environ.get(m.group(1), ""), v)
               for k, v in (step.get("headers") or {}).items()}
    body = step.get("body")
    c = connect(step)
    c.request(step.get("method", "GET"), step.get("path", "/"),
              body=body.encode() if body is not None else None, headers=headers)
    r = c.getresponse()
    out = {"status": r.status}
    if step.get("stream") and r.chunked:
        chunks = [chunk(r.fp)]
        rel = connect(step)
        rel.request("GET", "/release")
        rel.getresponse().read()
        rel.close()
        while True:
            d = chunk(r.fp)
            if not d:
                break
            chunks.append(d)
        out["chunks"] = chunks
    else:
        out["body"] = r.read().decode(errors="replace")
    c.close()
    return out


init = None
if os.environ.get("INIT_STEPS"):
    try:
        init = [run(s) for s in json.loads(os.environ["INIT_STEPS"])]
    except Exception as e:  # the test shows it
        init = [{"agentError": repr(e)}]
    print(json.dumps({"type": "ready"}), flush=True)

for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("type") == "context":
        continue
    try:
        steps = [run(s) for s in msg["body"].get("steps", [])]
        with open("/proc/self/environ", "rb") as f:
            environ = f.read().replace(b"\0", b"\n").decode(errors="replace")
        bundles = {}
        for var in ("SSL_CERT_FILE", "/etc/ssl/certs/ca-certificates.crt"):
            path = os.environ.get(var, var)
            if os.path.exists(path):
                with open(path) as f:
                    bundles[var] = f.read().count("BEGIN CERTIFICATE")
        reply = {"steps": steps, "env": dict(os.environ), "environ": environ, "bundles": bundles,
                 "init": init}
    except Exception as e:  # the test shows it
        reply = {"agentError": repr(e)}
    print(json.dumps({"id": msg["id"], "reply": reply}), flush=True)
