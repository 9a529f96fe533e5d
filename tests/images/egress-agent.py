# egress-agent.py: the Python agent of it.images.egress_python (tests/integration/images/
# egress_python.test.mjs). It is not part of the test image: the test passes this text as the App's
# command `/usr/bin/python3 -c <text>`, so it runs on the image's own python3 and libc resolver
# (getaddrinfo reads the /etc/resolv.conf sbx binds over the image's). It speaks sbx's agent
# protocol (one JSON line in, one out) and does what each message's body lists, in order:
#   {"steps": [{"resolve": NAME}, {"connect": [HOST, PORT]}, {"dns": [SERVER, NAME, "udp"|"tcp"]}]}
# and replies {"steps": [...]} with what happened to each: the addresses or the error, the bytes
# the peer sent first, the DNS answer's rcode and A records. Every network step has a timeout, 2 s
# or the step's "timeout" (a TCP connect under 1 s sends one SYN, so one denial, not two).
import json
import socket
import struct
import sys

TIMEOUT = 2.0


def resolve(name):
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET, socket.SOCK_STREAM)
        return {"ok": True, "addresses": sorted({i[4][0] for i in infos})}
    except OSError as e:
        return {"ok": False, "error": str(e)}


def connect(host, port, timeout):
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            try:
                data = s.recv(256)
            except OSError:
                data = b""
            return {"ok": True, "data": data.decode("utf-8", "replace")}
    except OSError as e:
        return {"ok": False, "error": str(e)}


def dns_query(name):
    q = struct.pack(">HHHHHH", 0x5BC1, 0x0100, 1, 0, 0, 0)
    for label in name.rstrip(".").split("."):
        q += bytes([len(label)]) + label.encode("ascii")
    return q + b"\0" + struct.pack(">HH", 1, 1)


def skip_name(msg, i):
    while msg[i] != 0:
        if msg[i] & 0xC0 == 0xC0:
            return i + 2
        i += msg[i] + 1
    return i + 1


def dns_answer(msg):
    _, flags, qd, an, _, _ = struct.unpack(">HHHHHH", msg[:12])
    i = 12
    for _ in range(qd):
        i = skip_name(msg, i) + 4
    records = []
    for _ in range(an):
        i = skip_name(msg, i)
        rtype, _, _, rdlen = struct.unpack(">HHIH", msg[i : i + 10])
        i += 10
        if rtype == 1 and rdlen == 4:
            records.append(socket.inet_ntoa(msg[i : i + 4]))
        i += rdlen
    return {"ok": True, "rcode": flags & 0xF, "addresses": records}


def dns(server, name, proto, timeout):
    q = dns_query(name)
    try:
        if proto == "tcp":
            with socket.create_connection((server, 53), timeout=timeout) as s:
                s.sendall(struct.pack(">H", len(q)) + q)
                n = struct.unpack(">H", s.recv(2))[0]
                msg = b""
                while len(msg) < n:
                    chunk = s.recv(n - len(msg))
                    if not chunk:
                        break
                    msg += chunk
                return dns_answer(msg)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            s.sendto(q, (server, 53))
            return dns_answer(s.recv(512))
    except (OSError, struct.error, IndexError) as e:
        return {"ok": False, "error": str(e)}


def step(s):
    timeout = float(s.get("timeout", TIMEOUT))
    if "resolve" in s:
        return resolve(s["resolve"])
    if "connect" in s:
        return connect(s["connect"][0], int(s["connect"][1]), timeout)
    if "dns" in s:
        return dns(*s["dns"], timeout)
    return {"ok": False, "error": "unknown step"}


for line in sys.stdin:
    if not line.strip():
        continue
    msg = json.loads(line)
    body = msg.get("body") or {}
    reply = {"python": sys.executable + " " + sys.version, "steps": [step(s) for s in body.get("steps", [])]}
    sys.stdout.write(json.dumps({"id": msg.get("id"), "reply": reply}) + "\n")
    sys.stdout.flush()
