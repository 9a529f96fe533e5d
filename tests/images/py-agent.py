#!/usr/bin/python3
# py-agent.py: the agent of the test image (tests/images/build-test-images.sh). It speaks sbx's
# agent protocol: one JSON line per message on stdin, one JSON line per reply on stdout, flushed
# at once. Each reply carries the interpreter's version and the image's /etc/os-release, so a test
# can tell that it was answered from the image's userspace and not the host's or sbx's rootfs.
import json
import sys


def os_release():
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        return "unreadable: " + str(e)


for line in sys.stdin:
    line = line.strip()
    if not line:
        continue
    try:
        msg = json.loads(line)
    except ValueError as e:
        sys.stderr.write("py-agent: bad line: %s\n" % e)
        continue
    reply = {"python": sys.version, "os_release": os_release(), "body": msg.get("body")}
    sys.stdout.write(json.dumps({"id": msg.get("id"), "reply": reply}) + "\n")
    sys.stdout.flush()
