#!/usr/bin/python3
# callback_agent.py: the agent of the callback tests (callbacks.test.mjs), run by the test image's
# python3 (standard library only). It speaks the agent protocol (one JSON line per message on
# stdin, {"id":..,"reply":..} on stdout) and calls the Sandbox API of its own Sandbox as a real
# agent would: to SBX_API_URL, trusting only SBX_CA_FILE (the server's certificate must name the
# address it is reached at), with "Authorization: Bearer $SBX_TOKEN".
#
# A message body {"steps": [STEP, ...]} says which calls to make, in order; each STEP is
#   {"method": "GET", "path": "/sandbox/v1/session", "json": {...} | "raw": "text",
#    "contentType": "...", "headers": {...}, "pad": N, "token": "..." | null, "url": "..."}
# where "pad" sends a JSON body of N bytes, "token" replaces SBX_TOKEN (null: no Authorization
# header at all) and "url" replaces SBX_API_URL (to use what another Sandbox was given). The reply
# holds, per step, the status, Content-Type, Idempotency-related headers and the body (parsed when
# JSON), and always the Sandbox context from the environment and the CA file's content, so the test
# can compare them with what the REST API says. Nothing here asserts: the test does.
import http.client
import json
import os
import ssl
import sys
import urllib.parse

CONTEXT_VARS = (
    "SBX_SESSION_ID",
    "SBX_APP_ID",
    "SBX_SANDBOX_ID",
    "SBX_API_URL",
    "SBX_TOKEN",
    "SBX_CA_FILE",
)


def tls_context():
    # The default context checks the chain and the name (an IP address SAN for an https://<ip>
    # URL): the test wants to know that an agent using plain library defaults is satisfied.
    return ssl.create_default_context(cafile=os.environ["SBX_CA_FILE"])


def call(step):
    url = urllib.parse.urlsplit(step.get("url") or os.environ["SBX_API_URL"])
    if url.scheme != "https":
        return {"error": "not an https URL: " + url.geturl()}
    headers = dict(step.get("headers") or {})
    token = step["token"] if "token" in step else os.environ.get("SBX_TOKEN")
    if token is not None:
        headers["Authorization"] = "Bearer " + token
    body = None
    if "json" in step:
        body = json.dumps(step["json"]).encode()
    elif "raw" in step:
        body = step["raw"].encode()
    elif "pad" in step:
        # {"pad":"xxx..."} of exactly N bytes.
        body = ('{"pad":"' + "x" * max(0, int(step["pad"]) - 10) + '"}').encode()
    if body is not None:
        headers.setdefault("Content-Type", step.get("contentType", "application/json"))
    path = step.get("path", "/")
    out = {}
    conn = http.client.HTTPSConnection(url.hostname, url.port or 443, context=tls_context(),
                                       timeout=30)
    try:
        conn.putrequest(step.get("method", "GET"), path, skip_accept_encoding=True)
        for k, v in headers.items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders()
        if body is not None:
            # A server may answer (413) and close before it has read a large body: what it
            # answered is what the test wants, so a failed send still reads the response.
            try:
                conn.send(body)
            except OSError as e:
                out["sendError"] = str(e)
        resp = conn.getresponse()
        text = resp.read().decode("utf-8", "replace")
        out["status"] = resp.status
        out["contentType"] = resp.getheader("Content-Type")
        out["wwwAuthenticate"] = resp.getheader("WWW-Authenticate")
        out["retryAfter"] = resp.getheader("Retry-After")
        try:
            out["body"] = json.loads(text) if text else None
        except ValueError:
            out["body"] = text
    except (OSError, http.client.HTTPException, ssl.SSLError) as e:
        out["error"] = "%s: %s" % (type(e).__name__, e)
    finally:
        conn.close()
    return out


def answer(body):
    reply = {"env": {k: os.environ.get(k) for k in CONTEXT_VARS}}
    ca = os.environ.get("SBX_CA_FILE")
    try:
        with open(ca, encoding="ascii") as f:
            reply["caPem"] = f.read()
    except (OSError, TypeError) as e:
        reply["caPem"] = None
        reply["caError"] = str(e)
    steps = body.get("steps") if isinstance(body, dict) else None
    reply["steps"] = [call(s) for s in steps or []]
    return reply


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    try:
        msg = json.loads(line)
    except ValueError as e:
        sys.stderr.write("callback_agent: bad line: %s\n" % e)
        continue
    try:
        reply = answer(msg.get("body"))
    except Exception as e:  # noqa: BLE001 - a reply with the error beats a crashed agent
        reply = {"agentError": "%s: %s" % (type(e).__name__, e)}
    sys.stdout.write(json.dumps({"id": msg.get("id"), "reply": reply}) + "\n")
    sys.stdout.flush()
