#!/usr/bin/env python3
"""secret_proxy.py: what sbx's brokering egress proxy (worker/host/secret_proxy.c) adds to an
HTTPS request: latency (p50, p99) and throughput of the same requests to the same test API,
brokered (a Sandbox whose TCP 443 the firewall sends to the proxy, which terminates TLS, replaces
the placeholder and opens TLS upstream) and direct (a Sandbox without secrets: the firewall's
forward path), interleaved in one run. Root; run in namespaces of its own:
    unshare --net --mount -- python3 tools/bench/secret_proxy.py \\
        build/tests/secret_proxy_run build/tests/net_ctl [--samples N] [--threads N]
Each sample is one request on a kept-alive connection ("keep-alive") or one request on a new
connection, TLS handshake included ("new conn"); throughput is requests per second of --threads
clients each sending --samples requests on one kept-alive connection. The API is
tests/integration/network/model_api.py in a world namespace behind the host's uplink.
"""
import argparse
import ctypes
import http.client
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("runner")
ap.add_argument("net_ctl")
ap.add_argument("--samples", type=int, default=500)
ap.add_argument("--threads", type=int, default=4)
args = ap.parse_args()
HERE = os.path.dirname(os.path.abspath(__file__))
MODEL_API = os.path.join(HERE, "..", "..", "tests", "integration", "network", "model_api.py")
POOL, API, HOST = "10.213.0.0/24", "11.11.11.1", "api.model.test"
tmp = tempfile.mkdtemp(prefix="sbx-bench-secret-proxy-")
libc = ctypes.CDLL(None, use_errno=True)
host_ns = os.open("/proc/self/ns/net", os.O_RDONLY)


def sh(*a):
    subprocess.run(a, check=True, capture_output=True)


def ctl(*a):
    return subprocess.run((args.net_ctl, "-p", POOL) + a, check=True, capture_output=True,
                          text=True).stdout


class In:
    def __init__(self, fd):
        self.fd = fd

    def __enter__(self):
        libc.setns(self.fd, 0x40000000)

    def __exit__(self, *a):
        libc.setns(host_ns, 0x40000000)


# The world and the uplink.
sh("ip", "link", "set", "lo", "up")
os.makedirs("/run/netns", exist_ok=True)
sh("mount", "-t", "tmpfs", "-o", "mode=0755", "sbx-bench", "/run/netns")
sh("ip", "netns", "add", "w")
sh("ip", "link", "add", "up0", "type", "veth", "peer", "name", "up0w", "netns", "w")
sh("ip", "addr", "add", "11.0.0.1/30", "dev", "up0")
sh("ip", "link", "set", "up0", "up")
sh("ip", "-n", "w", "addr", "add", "11.0.0.2/30", "dev", "up0w")
sh("ip", "-n", "w", "addr", "add", API + "/32", "dev", "lo")
sh("ip", "-n", "w", "link", "set", "up0w", "up")
sh("ip", "-n", "w", "link", "set", "lo", "up")
sh("ip", "route", "add", "default", "via", "11.0.0.2")
with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
    f.write("1")
ca, cakey = os.path.join(tmp, "ca.pem"), os.path.join(tmp, "ca.key")
crt, key, csr, ext = (os.path.join(tmp, n) for n in ("api.pem", "api.key", "api.csr", "api.ext"))
sh("openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
   "-keyout", cakey, "-subj", "/CN=bench CA", "-days", "2", "-out", ca)
with open(ext, "w") as f:
    f.write(f"subjectAltName=DNS:{HOST}\n")
sh("openssl", "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
   key, "-subj", "/CN=" + HOST, "-out", csr)
sh("openssl", "x509", "-req", "-in", csr, "-CA", ca, "-CAkey", cakey, "-CAcreateserial", "-days",
   "2", "-extfile", ext, "-out", crt)
api = subprocess.Popen(["ip", "netns", "exec", "w", sys.executable, MODEL_API,
                        f"api={API}:443:{crt}:{key}"], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True)
assert api.stdout.readline().strip() == "ready"

# Two Sandboxes: "brokered" (its 443 to the proxy) and "direct" (no secrets).
ctl("init")
ctl("egress", "80,443", "none")
sbs = {}
procs = []
for name in ("brokered", "direct"):
    p = subprocess.Popen(["unshare", "--net", "--", "sleep", "3600"])
    procs.append(p)
    while os.readlink(f"/proc/{p.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
        pass
    _, addr, _ = ctl("attach", "sbx_bench_" + name, str(p.pid)).split()
    sbs[name] = (addr, os.open(f"/proc/{p.pid}/ns/net", os.O_RDONLY))
proxy = subprocess.Popen([args.runner, "--ca-dir", os.path.join(tmp, "sbxca"), "--upstream-ca", ca,
                          "--max-per-sandbox", str(args.threads + 8), "--sandbox",
                          sbs["brokered"][0], "--secret", f"MODEL_KEY=sk-bench@{HOST}"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
import json  # noqa: E402 (after the setup, which needs none of it)

hello = json.loads(proxy.stdout.readline())
placeholder = hello["sandboxes"][sbs["brokered"][0]]["MODEL_KEY"]
threading.Thread(target=lambda: [None for _ in proxy.stdout], daemon=True).start()
ctl("secret-proxy", "sbx_bench_brokered", sbs["brokered"][0], str(hello["port"]))
ctx_brokered = ssl.create_default_context(cafile=os.path.join(tmp, "sbxca", "ca.pem"))
ctx_direct = ssl.create_default_context(cafile=ca)
PATHS = {"brokered": (ctx_brokered, placeholder), "direct": (ctx_direct, "sk-bench")}


def connect(path):
    ctx, _ = PATHS[path]
    with In(sbs[path][1]):
        raw = socket.create_connection((API, 443), 30)
    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c = http.client.HTTPConnection(HOST, 443, timeout=30)
    c.sock = ctx.wrap_socket(raw, server_hostname=HOST)
    return c


def one(c, path):
    c.request("POST", "/v1/messages", body=b'{"q":1}', headers={
        "x-api-key": PATHS[path][1], "Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    assert r.status == 200, r.status


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


lat = {(p, m): [] for p in PATHS for m in ("keep-alive", "new conn")}
conns = {p: connect(p) for p in PATHS}
for p in PATHS:  # warm: the proxy's certificate for the name, both connections
    one(conns[p], p)
for i in range(args.samples):
    for p in (("brokered", "direct") if i % 2 else ("direct", "brokered")):
        t = time.perf_counter()
        one(conns[p], p)
        lat[(p, "keep-alive")].append((time.perf_counter() - t) * 1e6)
        t = time.perf_counter()
        c = connect(p)
        one(c, p)
        lat[(p, "new conn")].append((time.perf_counter() - t) * 1e6)
        c.close()


def throughput(path):
    n = args.samples
    cs = [connect(path) for _ in range(args.threads)]
    ts = [threading.Thread(target=lambda c=c: [one(c, path) for _ in range(n)]) for c in cs]
    t = time.perf_counter()
    for th in ts:
        th.start()
    for th in ts:
        th.join()
    dt = time.perf_counter() - t
    for c in cs:
        c.close()
    return n * len(cs) / dt


rps = {p: throughput(p) for p in ("direct", "brokered")}
print(f"{'path':<10} {'request':<11} {'p50 us':>9} {'p99 us':>9} {'added p50':>10} {'req/s':>8}")
for m in ("keep-alive", "new conn"):
    for p in ("direct", "brokered"):
        v = lat[(p, m)]
        added = pct(v, 50) - pct(lat[("direct", m)], 50)
        tput = f"{rps[p]:.0f}" if m == "keep-alive" else "-"
        print(f"{p:<10} {m:<11} {pct(v, 50):9.0f} {pct(v, 99):9.0f} {added:10.0f} {tput:>8}")
print(f"({args.samples} samples per row, interleaved; req/s: {args.threads} clients on kept-alive "
      "connections)")
for c in conns.values():
    c.close()
proxy.stdin.close()
proxy.wait(30)
api.stdin.close()
api.wait(30)
for p in procs:
    p.kill()
