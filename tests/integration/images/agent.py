#!/usr/bin/env python3
# agent.py: the Python agent of the boot tests' Debian image (build-boot-images.sh puts it at
# /opt/agent/agent.py). It speaks the agent protocol (one JSON line in, one JSON line out) and
# answers from the userspace it runs in: the interpreter's sys.version, the image's
# /etc/os-release, and on request what the Sandbox looks like (cwd, uid, environment, files).
import json
import os
import sys


def answer(body):
    reply = {
        "version": sys.version,
        "os_release": open("/etc/os-release").read(),
        "cwd": os.getcwd(),
        "uid": os.getuid(),
        "gid": os.getgid(),
        "env": dict(os.environ),
    }
    if isinstance(body, dict):
        if "write" in body:
            try:
                for path in body["write"]:
                    with open(path, "w") as f:
                        f.write(body.get("data", ""))
                reply["written"] = True
            except OSError as e:
                reply["written"] = False
                reply["write_error"] = str(e)
        if "exists" in body:
            reply["exists"] = {p: os.path.lexists(p) for p in body["exists"]}
        if "stat" in body:
            reply["stat"] = {p: os.stat(p).st_uid for p in body["stat"]}
        if body.get("mounts"):
            reply["mounts"] = open("/proc/self/mounts").read()
        if "write_device" in body:
            try:
                with open(body["write_device"], "r+b", buffering=0) as f:
                    f.write(b"\0")
                    os.fsync(f.fileno())
                reply["write_device"] = "written"
            except OSError as e:
                reply["write_device"] = str(e)
    return reply


for line in sys.stdin:
    msg = json.loads(line)
    print(json.dumps({"id": msg["id"], "reply": answer(msg.get("body"))}), flush=True)
