#!/usr/bin/env python3
"""it_secret_proxy.py: the brokering egress proxy (worker/host/secret_proxy.c) between two
Sandboxes and a TLS "model API", in the network (and mount) namespace this test runs in, which
plays the host (`unshare --net --mount`). The Sandboxes are processes in network namespaces of
their own, linked and firewalled by sbx's own code (net_ctl: worker/host/links.c, firewall.c); their
TCP 80/443 goes to the proxy through the firewall's `secret_proxy` map, as the worker sets it for
an App with secrets. The "world" is another namespace holding public addresses; the API's
certificate comes from a test CA given to the proxy as its upstream CA file. Checks: the API sees
the real value of `x-api-key` and `Authorization: Bearer` where the Sandbox sent its placeholder;
keep-alive and a chunked request body; an SSE answer arrives chunk by chunk (the second chunk is
only sent once the client has read the first); the placeholder toward another host is refused
(403, misuse record) and never reaches it; another Sandbox's placeholder does nothing; an upstream
whose certificate fails verification gets 502; plain HTTP is brokered only to an address its Host
resolves to; the callback API's 443 on the host is not redirected; under an allowlist, a host the
App does not allow is dropped by the firewall before the proxy (drop_policy); the per-Sandbox
connection bound; and the value is in no record and no log line. DNS: sbx's forwarder runs beside
the proxy (as the first worker of a host runs it); a Sandbox with secrets under the public policy
has its lookups, over UDP and TCP and to whatever address it names, answered by the forwarder
from the host's resolver, and under an allowlist refused as the App's policy says; a third
Sandbox, without secrets, is not redirected (its DNS to another address than the resolver is
dropped, `drop_dns`, and the resolver answers it directly).
    it_secret_proxy.py <secret_proxy_run> <net_ctl>
"""
import ctypes
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

RUNNER, NET_CTL = sys.argv[1], sys.argv[2]
POOL = "10.213.0.0/24"
VALUE = "sk-model-Zq8vK3pW1xY7"
API, OTHER, UNTRUSTED = "11.11.11.1", "11.11.11.2", "11.11.11.3"
RESOLVER, NOWHERE = "11.11.11.53", "11.11.11.99"  # the host's resolver; an address nothing serves
tmp = tempfile.mkdtemp(prefix="sbx-secret-proxy-")
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def sh(*args):
    subprocess.run(args, check=True)


# ---- the world: the host's uplink, public addresses, names, certificates ----
libc = ctypes.CDLL(None, use_errno=True)
host_ns = os.open("/proc/self/ns/net", os.O_RDONLY)


class In:
    """Sockets made inside `with In(fd):` belong to that network namespace (setns of this
    thread only; the socket keeps its namespace after the switch back)."""

    def __init__(self, fd):
        self.fd = fd

    def __enter__(self):
        if libc.setns(self.fd, 0x40000000) != 0:
            raise OSError(ctypes.get_errno(), "setns")

    def __exit__(self, *a):
        libc.setns(host_ns, 0x40000000)


def ctl(*args):
    return subprocess.run((NET_CTL, "-p", POOL) + args, check=True, capture_output=True,
                          text=True).stdout


sh("ip", "link", "set", "lo", "up")
# Named namespaces live in /run/netns: a tmpfs of this mount namespace keeps this run's apart (and
# leaves nothing behind in the host's).
os.makedirs("/run/netns", exist_ok=True)
sh("mount", "-t", "tmpfs", "-o", "mode=0755", "sbx-secret-proxy", "/run/netns")
W = "sbxspw"
sh("ip", "netns", "add", W)
sh("ip", "link", "add", "wup", "type", "veth", "peer", "name", "wdown")
sh("ip", "link", "set", "wdown", "netns", W)
sh("ip", "addr", "add", "11.11.11.254/24", "dev", "wup")
sh("ip", "link", "set", "wup", "up")
for a in (API, OTHER, UNTRUSTED, RESOLVER):
    sh("ip", "netns", "exec", W, "ip", "addr", "add", a + "/24", "dev", "wdown")
sh("ip", "netns", "exec", W, "ip", "link", "set", "wdown", "up")
sh("ip", "netns", "exec", W, "ip", "link", "set", "lo", "up")
world_ns = os.open("/run/netns/" + W, os.O_RDONLY)
ctl("init")
ctl("egress", "80,443", RESOLVER)
sandboxes = []
for name in ("sbx_spA", "sbx_spB", "sbx_spC"):
    p = subprocess.Popen(["unshare", "--net", "--", "sleep", "600"])
    while os.readlink(f"/proc/{p.pid}/ns/net") == os.readlink("/proc/self/ns/net"):
        pass  # until it is in its own namespace
    ifname, addr, host_addr = ctl("attach", name, str(p.pid)).split()
    sandboxes.append({"id": name, "proc": p, "addr": addr, "host": host_addr,
                      "ns": os.open(f"/proc/{p.pid}/ns/net", os.O_RDONLY)})
SB_A, SB_B, SB_C = (sb["addr"] for sb in sandboxes)  # C: an App without secrets
NS = {sb["addr"]: sb["ns"] for sb in sandboxes}
hosts = os.path.join(tmp, "hosts")
with open(hosts, "w") as f:
    f.write(f"127.0.0.1 localhost\n{API} api.model.test\n{OTHER} other.test\n")
sh("mount", "--bind", hosts, "/etc/hosts")


def openssl(*args):
    subprocess.run(("openssl",) + args, check=True, capture_output=True)


def cert(name, ca_key, ca_pem, out):
    key, csr, ext = (os.path.join(tmp, out + s) for s in (".key", ".csr", ".ext"))
    with open(ext, "w") as f:
        f.write(f"subjectAltName=DNS:{name}\nextendedKeyUsage=serverAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout",
            key, "-subj", "/CN=" + name, "-out", csr)
    openssl("x509", "-req", "-in", csr, "-CA", ca_pem, "-CAkey", ca_key, "-CAcreateserial",
            "-days", "2", "-extfile", ext, "-out", os.path.join(tmp, out + ".pem"))
    return os.path.join(tmp, out + ".pem"), key


def ca(name):
    key, pem = os.path.join(tmp, name + ".key"), os.path.join(tmp, name + ".pem")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-subj", "/CN=" + name, "-days", "2", "-out", pem)
    return key, pem


test_ca_key, test_ca = ca("test-ca")
rogue_ca_key, rogue_ca = ca("rogue-ca")
api_cert = cert("api.model.test", test_ca_key, test_ca, "api")
other_cert = cert("other.test", test_ca_key, test_ca, "other")
untrusted_cert = cert("bad.test", rogue_ca_key, rogue_ca, "bad")

# ---- the model API ----
seen = {"other": 0}
release = threading.Event()


class Api(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self):
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
        if self.server.name == "other":
            seen["other"] += 1
        if self.path == "/then-close":  # as a server closes an idle kept-alive connection
            self.close_connection = True
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i, data in enumerate([b"data: one\n\n", b"data: two\n\n"]):
                if i == 1:
                    release.wait(60)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        out = json.dumps({"server": self.server.name, "path": self.path,
                          "headers": {k.lower(): v for k, v in self.headers.items()},
                          "body": body.decode()}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    do_GET = do_POST = answer


upstream_closed = threading.Semaphore(0)


class Server(ThreadingHTTPServer):
    def shutdown_request(self, request):
        super().shutdown_request(request)
        upstream_closed.release()


def serve(addr, port, name, certkey=None):
    with In(world_ns):
        srv = Server((addr, port), Api)
    srv.daemon_threads = True
    srv.name = name
    if certkey:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*certkey)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()


serve(API, 443, "api", api_cert)
serve(API, 80, "api-plain")
serve(OTHER, 443, "other", other_cert)
serve(OTHER, 80, "other")
serve(UNTRUSTED, 443, "untrusted", untrusted_cert)

# ---- the host's DNS resolver: api.model.test is API, any other name does not exist ----
def dns_query(name, qid):
    q = b"".join(bytes([len(l)]) + l.encode() for l in name.split(".")) + b"\0"
    return qid.to_bytes(2, "big") + b"\x01\x00\x00\x01\0\0\0\0\0\0" + q + b"\0\x01\0\x01"


def dns_answer(q):
    end = 12
    while q[end]:
        end += 1 + q[end]
    question = q[12:end + 5]
    name = []
    i = 12
    while q[i]:
        name.append(q[i + 1:i + 1 + q[i]].decode())
        i += 1 + q[i]
    found = ".".join(name).lower() == "api.model.test"
    head = q[:2] + (b"\x81\x80" if found else b"\x81\x83") + b"\0\x01" + \
        (b"\0\x01" if found else b"\0\0") + b"\0\0\0\0"
    rr = b"\xc0\x0c\0\x01\0\x01\0\0\0\x3c\0\x04" + socket.inet_aton(API) if found else b""
    return head + question + rr


def resolver_udp(sock):
    while True:
        q, peer = sock.recvfrom(512)
        sock.sendto(dns_answer(q), peer)


def resolver_tcp(lsock):
    while True:
        conn, _ = lsock.accept()
        with conn:
            f = conn.makefile("rb")
            n = int.from_bytes(f.read(2), "big")
            a = dns_answer(f.read(n))
            conn.sendall(len(a).to_bytes(2, "big") + a)


with In(world_ns):
    dns_udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dns_udp.bind((RESOLVER, 53))
    dns_tcp = socket.socket()
    dns_tcp.bind((RESOLVER, 53))
    dns_tcp.listen(8)
threading.Thread(target=resolver_udp, args=(dns_udp,), daemon=True).start()
threading.Thread(target=resolver_tcp, args=(dns_tcp,), daemon=True).start()


def lookup(src, addr, name, tcp=False):
    """A lookup from a Sandbox to addr:53: (rcode, [addresses]), or None when nothing answers."""
    qid = int.from_bytes(os.urandom(2), "big")
    q = dns_query(name, qid)
    with In(NS[src]):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM)
    s.settimeout(2 if not tcp else 30)
    try:
        if tcp:
            s.connect((addr, 53))
            s.sendall(len(q).to_bytes(2, "big") + q)
            f = s.makefile("rb")
            a = f.read(int.from_bytes(f.read(2), "big"))
        else:
            s.sendto(q, (addr, 53))
            a = s.recv(4096)
    except OSError:
        return None
    finally:
        s.close()
    if len(a) < 12 or int.from_bytes(a[:2], "big") != qid:
        return None
    rcode, an = a[3] & 0xF, int.from_bytes(a[6:8], "big")
    return rcode, ([socket.inet_ntoa(a[-4:])] if an else [])


# ---- the proxy and the DNS forwarder, and the redirects the worker's firewall makes ----
ca_dir = os.path.join(tmp, "ca")
logf = open(os.path.join(tmp, "proxy.log"), "w+")
proxy = subprocess.Popen(
    [RUNNER, "--ca-dir", ca_dir, "--upstream-ca", test_ca, "--max-per-sandbox", "4",
     "--dns", RESOLVER,
     "--sandbox", SB_A, "--secret", f"MODEL_KEY={VALUE}@api.model.test",
     "--sandbox", SB_B, "--secret", f"MODEL_KEY={VALUE}@api.model.test"],
    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf, text=True)
hello = json.loads(proxy.stdout.readline())
port = hello["port"]
ph_a = hello["sandboxes"][SB_A]["MODEL_KEY"]
ph_b = hello["sandboxes"][SB_B]["MODEL_KEY"]
check(ph_a.startswith("sbx_ph_") and ph_a != ph_b, "each Sandbox has its own placeholder")
for sb in sandboxes[:2]:
    ctl("secret-proxy", sb["id"], sb["addr"], str(port))
records = []
rec_lock = threading.Condition()


def read_records():
    for line in proxy.stdout:
        with rec_lock:
            records.append(json.loads(line))
            rec_lock.notify_all()


threading.Thread(target=read_records, daemon=True).start()


def wait_record(pred, what):
    with rec_lock:
        ok = rec_lock.wait_for(lambda: any(pred(r) for r in records), timeout=30)
    check(ok, what)
    return next((r for r in records if pred(r)), None)


sbx_ctx = ssl.create_default_context(cafile=os.path.join(ca_dir, "ca.pem"))


class Conn(http.client.HTTPSConnection):
    """HTTPS from a Sandbox's address to an address, with the name for SNI and Host."""

    def __init__(self, src, addr, name):
        super().__init__(name, 443, context=sbx_ctx, timeout=30)
        self.src, self.addr = src, addr

    def connect(self):
        with In(NS[self.src]):
            raw = socket.create_connection((self.addr, 443), 30)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)


def request(conn, method, path, headers, body=None):
    conn.request(method, path, body=body, headers=headers)
    r = conn.getresponse()
    return r.status, r.read(), r


# 1. The API sees the real value where the Sandbox sent its placeholder; keep-alive; chunked body.
c = Conn(SB_A, API, "api.model.test")
st, body, r = request(c, "POST", "/v1/messages?beta=true",
                      {"x-api-key": ph_a, "Authorization": "Bearer " + ph_a,
                       "Content-Type": "application/json"}, b'{"q":1}')
echo = json.loads(body)

check(st == 200 and echo["headers"]["x-api-key"] == VALUE, "x-api-key reaches the API as the value")
check(echo["headers"]["authorization"] == "Bearer " + VALUE, "Authorization: Bearer too")
check(echo["body"] == '{"q":1}', "the body goes through untouched")
check(c.sock.version() and c.sock.selected_alpn_protocol() in (None, "http/1.1"),
      "TLS from the proxy, http/1.1 at most")
st, body, r = request(c, "POST", "/again", {"x-api-key": ph_a},
                      iter([b"chunk-one,", b"chunk-two"]))
echo = json.loads(body)

check(st == 200 and echo["body"] == "chunk-one,chunk-two" and echo["headers"]["x-api-key"] == VALUE,
      "a second request on the same connection, with a chunked body")
# The API closes the kept-alive upstream connection after an answer: the next request of the
# same client connection goes on a new one.
while upstream_closed.acquire(blocking=False):
    pass
st, body, r = request(c, "GET", "/then-close", {"x-api-key": ph_a})
check(st == 200, "an answer after which the API closes its connection")
upstream_closed.acquire(timeout=30)
st, body, r = request(c, "GET", "/after", {"x-api-key": ph_a})
check(st == 200 and json.loads(body)["headers"]["x-api-key"] == VALUE,
      "the next request goes on a new upstream connection")
c.close()
rec = wait_record(lambda r: r["kind"] == "request" and r["path"] == "/v1/messages",
                  "the brokered request is reported")
if rec:
    check(rec["secrets"] == "MODEL_KEY" and rec["host"] == "api.model.test" and
          rec["method"] == "POST" and rec["status"] == 200 and rec["bytesUp"] > 0 and
          rec["bytesDown"] > 0 and rec["sandbox"] == "sbx_test1",
          "its record: secret, host, method, path without query, status, bytes")

# 2. An SSE answer streams: the second event is only sent once the first was read here.
c = Conn(SB_A, API, "api.model.test")
c.request("POST", "/stream", headers={"x-api-key": ph_a})
r = c.getresponse()


def read_chunk(fp):
    size = int(fp.readline().split(b";")[0], 16)
    data = fp.read(size) if size else b""
    fp.readline()
    return data


check(r.status == 200 and r.chunked, "the SSE answer comes chunked")
first = read_chunk(r.fp)
check(first == b"data: one\n\n", "the first SSE event arrives before the second exists")
release.set()
check(read_chunk(r.fp) == b"data: two\n\n", "then the second")
check(read_chunk(r.fp) == b"", "and the stream ends")
c.close()

# 3. The same placeholder toward another host: 403, a misuse record, and nothing reaches it.
c = Conn(SB_A, OTHER, "other.test")
st, body, r = request(c, "GET", "/collect?x=1", {"x-api-key": ph_a})
check(st == 403 and json.loads(body)["code"] == "secret-misuse", "toward other.test: 403")
check(seen["other"] == 0, "other.test never saw the request")
rec = wait_record(lambda r: r["kind"] == "misuse", "the misuse is reported")
if rec:
    check(rec["host"] == "other.test" and rec["secrets"] == "MODEL_KEY" and rec["path"] == "/collect",
          "its record names the secret, the host and the path")
# Without a placeholder, other.test is reached as usual.
c = Conn(SB_A, OTHER, "other.test")
st, body, r = request(c, "GET", "/", {"x-api-key": "plain"})
check(st == 200 and json.loads(body)["headers"]["x-api-key"] == "plain", "other requests pass")
c.close()

# 4. Sandbox A's placeholder sent from Sandbox B: nothing is replaced.
c = Conn(SB_B, API, "api.model.test")
st, body, r = request(c, "GET", "/", {"x-api-key": ph_a})
check(st == 200 and json.loads(body)["headers"]["x-api-key"] == ph_a,
      "another Sandbox's placeholder does nothing")
st, body, r = request(c, "GET", "/", {"x-api-key": ph_b})
check(st == 200 and json.loads(body)["headers"]["x-api-key"] == VALUE, "B's own does")
c.close()

# 5. An upstream whose certificate the upstream CA did not sign: 502, reported.
c = Conn(SB_A, UNTRUSTED, "bad.test")
st, body, r = request(c, "GET", "/", {})
check(st == 502 and json.loads(body)["code"] == "upstream-untrusted", "an untrusted upstream: 502")
wait_record(lambda r: r["status"] == 502 and r["host"] == "bad.test" and "trusted" in r["error"],
            "the failed verification is reported")

# 6. Plain HTTP: brokered to an address its Host resolves to, refused toward any other.
def plain(src, addr, host, headers):
    with In(NS[src]):
        s = socket.create_connection((addr, 80), 30)
    hdr = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    s.sendall(f"GET /p HTTP/1.1\r\nHost: {host}\r\n{hdr}Connection: close\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


st, body = plain(SB_A, API, "api.model.test", {"x-api-key": ph_a})
check(st == 200 and json.loads(body)["headers"]["x-api-key"] == VALUE, "plain HTTP: brokered")
st, body = plain(SB_A, OTHER, "api.model.test", {"x-api-key": ph_a})
check(st == 403, "plain HTTP with the secret's Host to another address: 403")

# 7. The callback API (TCP 443 of the host's side of the link) is not redirected.
lsock = socket.socket()
lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lsock.bind((sandboxes[0]["host"], 443))
lsock.listen(4)


def callback_api():
    conn, _ = lsock.accept()
    conn.sendall(b"callback API")
    conn.close()


threading.Thread(target=callback_api, daemon=True).start()
with In(NS[SB_A]):
    cb = socket.create_connection((sandboxes[0]["host"], 443), 30)
check(cb.recv(64) == b"callback API", "the host's own 443 (callback API) is reached directly")
cb.close()
lsock.close()


def counter(name):
    for line in ctl("counters").splitlines():
        f = line.split()
        if f[0] == "drop_" + name:
            return int(f[1])
    return 0


# 7b. DNS. A Sandbox with secrets under the public policy: its lookup sent to an address where no
# resolver is gets the answer of the host's resolver, through sbx's forwarder; over TCP too.
check(lookup(SB_A, NOWHERE, "api.model.test") == (0, [API]),
      "secrets, public: a lookup sent anywhere is answered by the forwarder")
check(lookup(SB_A, NOWHERE, "api.model.test", tcp=True) == (0, [API]),
      "secrets, public: over TCP too")
forwarded = 2
# A Sandbox without secrets under the public policy is not redirected: DNS to another address
# than the resolver is dropped, and the resolver answers it directly.
before = counter("dns")
check(lookup(SB_C, NOWHERE, "api.model.test") is None and counter("dns") > before,
      "no secrets, public: DNS to another address is dropped (drop_dns), not redirected")
check(lookup(SB_C, RESOLVER, "api.model.test") == (0, [API]),
      "no secrets, public: the resolver answers it")


# 8. Under an allowlist the App's policy still decides: a host it does not allow is dropped by
# the firewall before any redirect (drop_policy), even with the proxy in the way.
ctl("policy", "app_sp", API + "/32")
ctl("sandbox-egress", "sbx_spA", SB_A, "allowlist", "app_sp")
c = Conn(SB_A, API, "api.model.test")
st, body, r = request(c, "GET", "/", {"x-api-key": ph_a})
check(st == 200 and json.loads(body)["headers"]["x-api-key"] == VALUE,
      "allowlist: the allowed host is brokered")
c.close()
before = counter("policy")
with In(NS[SB_A]):
    probe = socket.socket()
probe.settimeout(2)
try:
    probe.connect((OTHER, 443))
    dropped = False
except OSError:
    dropped = True
probe.close()
check(dropped and counter("policy") > before, "allowlist: another host is dropped (drop_policy)")
# Its DNS: the forwarder now asks the App's policy (which here allows no name): REFUSED. The
# forwarder reads the firewall's sets again within half a second: until then it may still answer.
for _ in range(300):
    got = lookup(SB_A, NOWHERE, "api.model.test")
    if got and got[0] == 5:
        break
    forwarded += got is not None and got[0] == 0
    threading.Event().wait(0.1)
check(got == (5, []), "secrets, allowlist: a name the App does not allow is REFUSED")
ctl("sandbox-egress", "sbx_spA", SB_A, "public")

# 9. The bound: four connections of A are served, a fifth is closed at once; B still gets in.
with In(NS[SB_A]):
    held = [socket.create_connection((API, 443), 30) for _ in range(4)]
    extra = socket.create_connection((API, 443), 30)
held_tls = [sbx_ctx.wrap_socket(s, server_hostname="api.model.test") for s in held]
try:
    sbx_ctx.wrap_socket(extra, server_hostname="api.model.test")
    refused = False
except (ssl.SSLError, OSError):
    refused = True
check(refused, "a fifth connection of one Sandbox is closed at once")
c = Conn(SB_B, API, "api.model.test")
st, body, r = request(c, "GET", "/", {"x-api-key": ph_b})
check(st == 200, "another Sandbox is served meanwhile")
c.close()
for s in held_tls:
    s.close()

# ---- the value is nowhere but on the wire to the API ----
proxy.stdin.close()
proxy.wait(30)
logf.seek(0)
log = logf.read()
check("misuses" in log and proxy.returncode == 0, "the proxy stopped and said what it did")
check(f"dns forwarder: {forwarded} forwarded" in log,
      f"the forwarder forwarded the {forwarded} lookups of Sandbox A, none of C's")
if failures:
    print("proxy exit status", proxy.returncode, log[-4000:])
check(VALUE not in log, "the value is in no log line")
check(all(VALUE not in json.dumps(r) for r in records), "the value is in no record")
# The map element: replaced by another port, removed, and removing what is absent is no error.
def proxy_map():
    return subprocess.run(["nft", "list", "map", "inet", "sbx", "secret_proxy"], check=True,
                          capture_output=True, text=True).stdout


check(f": {port}" in proxy_map() and proxy_map().count(":") >= 2, "each Sandbox is in the map")
ctl("secret-proxy", "sbx_spA", SB_A, "4242")
check(": 4242" in proxy_map(), "an element replaced by another port")
for sb in sandboxes[:2]:
    ctl("secret-proxy", sb["id"], sb["addr"], "0")
    ctl("secret-proxy", sb["id"], sb["addr"], "0")
for sb in sandboxes:
    sb["proc"].kill()
check("elements" not in proxy_map(), "elements removed (twice: absent is no error)")
subprocess.run(["ip", "netns", "del", W])
shutil.rmtree(tmp, ignore_errors=True)
if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
