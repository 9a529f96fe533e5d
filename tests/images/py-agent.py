#!/usr/bin/python3
# py-agent.py: the agent of the test image (tests/images/build-test-images.sh). It speaks sbx's
# agent protocol: one JSON line per message on stdin, one JSON line per reply on stdout, flushed
# at once. Each reply carries the interpreter's version and the image's /etc/os-release, so a test
# can tell that it was answered from the image's userspace and not the host's or sbx's rootfs; a
# body may also ask it to write or read a file, or to show its environment, cwd and uid.
import json
import os
import sys


def os_release():
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        return "unreadable: " + str(e)


def act(body):
    """What a test may ask besides the reply itself: write or read a file, see the environment,
    the working directory and the user the agent runs as."""
    out = {}
    if not isinstance(body, dict):
        return out
    w = body.get("writeFile")
    if isinstance(w, dict):
        try:
            with open(w["path"], "w", encoding="utf-8") as f:
                f.write(w.get("data", ""))
            out["writeFile"] = {"ok": True}
        except (OSError, KeyError) as e:
            out["writeFile"] = {"error": str(e)}
    r = body.get("readFile")
    if isinstance(r, str):
        try:
            with open(r, encoding="utf-8") as f:
                out["readFile"] = {"data": f.read()}
        except OSError as e:
            out["readFile"] = {"error": str(e)}
    if body.get("whoami"):
        out["env"] = dict(os.environ)
        out["cwd"] = os.getcwd()
        out["uid"] = os.getuid()
    return out


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    try:
        msg = json.loads(line)
    except ValueError as e:
        sys.stderr.write("py-agent: bad line: %s\n" % e)
        continue
    body = msg.get("body")
    reply = {"python": sys.version, "os_release": os_release(), "body": body}
    reply.update(act(body))
    sys.stdout.write(json.dumps({"id": msg.get("id"), "reply": reply}) + "\n")
    sys.stdout.flush()
