#!/bin/bash
# it_packets.sh: proves the Sandbox network rules with real packets (issue 5).
#
# Runs inside a network and mount namespace of its own (tests/network.cmake starts it under
# `unshare --net --mount`): that namespace plays the host. It builds, with ip netns and veth pairs,
#   - "world": the uplink's far side, holding public addresses (11.11.11.11 and .12 with listeners
#     on TCP 80, 443, 8080 and 25 and UDP 5000, and a DNS resolver on 11.11.11.53 answering the
#     test names: outside every range sbx blocks; they exist only inside these namespaces, nothing
#     leaves the machine), a simulated
#     private network (10.99.0.10, 172.16.5.10, 192.168.77.10), a metadata service
#     (169.254.169.254) and two other special-use addresses (192.0.2.10, 100.64.0.10);
#   - on the host, listeners on TCP 443, 2049 and 8080;
#   - Sandboxes: processes in network namespaces of their own, linked and firewalled by sbx's
#     own code (net_ctl calls worker/host/links.c and worker/host/firewall.c).
# Then it checks from inside the Sandboxes what gets through, which drop counter moves, and, after
# the firewall table is deleted, that the same probes do get through (the firewall, not the
# topology, was what stopped them). Usage: it_packets.sh NET_CTL NET_PROBE
set -u
CTL=$1
PROBE=$2
POOL=10.213.0.0/24
W=sbxw$$
TMP=$(mktemp -d /tmp/sbx-it-network.XXXXXX)
FAILS=0
PIDS=()

cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for f in "$TMP"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    ip netns del "$W" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

ok() { echo "ok - $*"; }
bad() { echo "FAIL - $*"; FAILS=$((FAILS + 1)); }
ctl() { "$CTL" -p "$POOL" "$@"; }
counter() { ctl counters | awk -v n="drop_$1" '$1 == n { print $2 }'; }

# expect OUTCOME DESCRIPTION PROBE-ARGS...: runs the probe in Sandbox $SB_PID.
# OUTCOME: answered, or blocked (timed out: silently dropped).
expect() {
    local want=$1 what=$2
    shift 2
    local out rc
    if [ -n "${SB_NETNS:-}" ]; then
        out=$(ip netns exec "$SB_NETNS" "$PROBE" "$@" 2>&1)
    else
        out=$(nsenter -t "$SB_PID" -n "$PROBE" "$@" 2>&1)
    fi
    rc=$?
    LAST_OUT=$out
    case "$want" in
    answered) [ $rc -eq 0 ] && ok "$what ($out)" || bad "$what: expected an answer, got rc=$rc $out" ;;
    blocked) [ $rc -eq 1 ] && ok "$what ($out)" || bad "$what: expected a silent drop, got rc=$rc $out" ;;
    refused) [ $rc -eq 2 ] && ok "$what ($out)" || bad "$what: expected a refusal, got rc=$rc $out" ;;
    esac
}

# expect_count REASON BEFORE: the counter drop_REASON grew since BEFORE.
expect_count() {
    local now
    now=$(counter "$1")
    [ "$now" -gt "$2" ] && ok "counter drop_$1 grew ($2 -> $now)" || bad "counter drop_$1 did not grow ($2 -> $now)"
}

# A Sandbox: a process in a fresh network namespace, waited for until it is really in it.
# Sets NEW_PID.
start_sandbox_process() {
    unshare --net -- sleep 600 </dev/null >/dev/null 2>&1 &
    NEW_PID=$!
    PIDS+=("$NEW_PID")
    local i
    for i in $(seq 1 200); do
        [ "$(readlink /proc/$NEW_PID/ns/net)" != "$(readlink /proc/self/ns/net)" ] && return 0
        sleep 0.01
    done
    return 1
}

# ---- topology ----
ip link set lo up
ip netns add "$W"
ip -n "$W" link set lo up
ip link add up0 type veth peer name up0w netns "$W"
ip addr add 11.0.0.1/30 dev up0
ip link set up0 up
ip -n "$W" addr add 11.0.0.2/30 dev up0w
ip -n "$W" link set up0w up
ip route add default via 11.0.0.2
for a in 11.11.11.11 11.11.11.12 11.11.11.53 10.99.0.10 172.16.5.10 192.168.77.10 169.254.169.254 192.0.2.10 100.64.0.10; do
    ip -n "$W" addr add $a/32 dev lo
done
# Only for the control phase: without sbx's masquerade, the world can answer the pool directly.
ip -n "$W" route add $POOL via 11.0.0.1
ip netns exec "$W" "$PROBE" serve --pidfile "$TMP/world.pid" --tcp 80,443,8080,25 --udp 53,5000 || exit 1
# The world's resolver (Debian's dnsmasq as an authoritative stand-in), TTL 2 s.
ip netns exec "$W" dnsmasq --conf-file=/dev/null --no-resolv --no-hosts --bind-interfaces \
    --listen-address=11.11.11.53 --user=root --group=root --pid-file="$TMP/dns.pid" \
    --local-ttl=2 --address=/api.test/11.11.11.11 --address=/alt.test/11.11.11.12 || exit 1
"$PROBE" serve --pidfile "$TMP/host.pid" --tcp 443,2049,8080 --udp 53 || exit 1

# Another table of the host: sbx must leave it exactly as it was.
nft -f - <<'EOF'
table ip foreign {
    set keep { type ipv4_addr; elements = { 192.0.2.77 } }
    chain c { type filter hook input priority 10; policy accept; ip saddr @keep drop; }
}
EOF
FOREIGN_BEFORE=$(nft list table ip foreign)

# ---- the firewall and the first Sandbox ----
out=$("$CTL" ro-counters 2>&1) && bad "read-only counters without a table: $out" ||
    ok "read-only access before any worker fails clearly ($out)"
nft list table inet sbx >/dev/null 2>&1 && bad "read-only access created the table" ||
    ok "read-only access created nothing"
ctl init || { bad "init"; exit 1; }
ctl egress 80,443 11.11.11.53 || { bad "egress settings"; exit 1; }
"$CTL" ro-counters | grep -q "^drop_host 0 0$" && ok "read-only counters after init" ||
    bad "read-only counters after init"
ctl init && ok "a second init keeps the table" || bad "second init"

[ "$(sysctl -n net.ipv4.ip_forward)" = 1 ] && ok "forwarding enabled" || bad "forwarding not enabled"
start_sandbox_process || bad "Sandbox 1 process"
SB1_PID=$NEW_PID
read -r IF1 ADDR1 GW1 < <(ctl attach sbx_test1 "$SB1_PID") || { bad "attach 1"; exit 1; }
ok "Sandbox 1: $IF1 $ADDR1 via $GW1"
SB_PID=$SB1_PID
nsenter -t "$SB_PID" -n ip -4 route show | grep -q "default via $GW1 dev eth0" &&
    ok "default route via the host side" || bad "no default route via $GW1"
# IPv6 on the link (no DAD wait), so that IPv6 would work if the firewall let it.
ip -6 addr add fd00:5b::1/64 dev "$IF1" nodad
nsenter -t "$SB_PID" -n ip -6 addr add fd00:5b::2/64 dev eth0 nodad

echo "# to the host"
expect answered "TCP 443 to the host" tcp "$GW1" 443
c=$(counter host)
expect blocked "TCP 8080 to the host" tcp "$GW1" 8080
expect_count host "$c"
expect blocked "TCP 8080 to the host's uplink address" tcp 11.0.0.1 8080
expect blocked "UDP 53 to the host" udp "$GW1" 53
expect blocked "TCP 2049 to the host without NFS" tcp "$GW1" 2049
ctl nfs sbx_test1 "$ADDR1" on || bad "nfs on"
expect answered "TCP 2049 to the host with NFS attached" tcp "$GW1" 2049
# An NFS connection open across a change: kept across a repeated attach (the control), cut by
# the detach (the rule refuses new connections; the detach ends the open ones).
hold() { # hold NAME: an open connection to 2049 in the background, once it is open
    rm -f "$TMP/go"
    nsenter -t "$SB_PID" -n "$PROBE" tcp-hold "$GW1" 2049 "$TMP/go" --timeout 1000 >"$TMP/$1" &
    HOLD=$!
    for _ in $(seq 1 300); do grep -q open "$TMP/$1" 2>/dev/null && return 0; sleep 0.01; done
    bad "no open connection for $1"
}
hold kept
ctl nfs sbx_test1 "$ADDR1" on || bad "nfs on again"
touch "$TMP/go"
wait $HOLD && ok "an open NFS connection survives a repeated attach" || bad "kept: $(cat "$TMP/kept")"
hold cut
ctl nfs sbx_test1 "$ADDR1" off || bad "nfs off"
touch "$TMP/go"
wait $HOLD
[ $? -eq 1 ] && ok "NFS detach cuts the open connection" || bad "cut: $(cat "$TMP/cut")"
expect blocked "TCP 2049 to the host after NFS detach" tcp "$GW1" 2049

echo "# private networks, metadata, special-use ranges"
c=$(counter private)
for a in 10.99.0.10 172.16.5.10 192.168.77.10; do
    expect blocked "TCP to private $a" tcp $a 80
    expect blocked "UDP to private $a" udp $a 53
    expect blocked "ICMP to private $a" icmp $a
done
expect_count private "$c"
c=$(counter metadata)
expect blocked "TCP to metadata 169.254.169.254" tcp 169.254.169.254 80
expect blocked "UDP to metadata" udp 169.254.169.254 53
expect blocked "ICMP to metadata" icmp 169.254.169.254
expect_count metadata "$c"
c=$(counter special)
expect blocked "TCP to TEST-NET-1 192.0.2.10" tcp 192.0.2.10 80
expect blocked "TCP to shared address space 100.64.0.10" tcp 100.64.0.10 80
expect_count special "$c"

echo "# IPv6"
c=$(counter ipv6)
expect blocked "TCP 443 to the host over IPv6" tcp fd00:5b::1 443
expect blocked "ICMPv6 echo to the host" icmp fd00:5b::1
expect_count ipv6 "$c"

echo "# public IPv4: egress_ports (80,443) and dns_resolvers (11.11.11.53) only"
expect answered "TCP 80 to public 11.11.11.11" tcp 11.11.11.11 80
echo "$LAST_OUT" | grep -q "from 11.0.0.1" && ok "masqueraded to the uplink address" ||
    bad "not masqueraded: $LAST_OUT"
expect answered "TCP 443 to public 11.11.11.11" tcp 11.11.11.11 443
c=$(counter egress)
expect blocked "TCP 8080 to public 11.11.11.11" tcp 11.11.11.11 8080
expect blocked "TCP 25 to public 11.11.11.11" tcp 11.11.11.11 25
expect blocked "UDP 5000 to public 11.11.11.11" udp 11.11.11.11 5000
expect blocked "ICMP to public 11.11.11.11" icmp 11.11.11.11
expect_count egress "$c"
expect answered "DNS to the configured resolver" dns api.test 11.11.11.53
echo "$LAST_OUT" | grep -q "rcode=0 11.11.11.11/" && ok "the resolver's answer came back" ||
    bad "DNS answer: $LAST_OUT"
c=$(counter dns)
expect blocked "DNS to another public address" dns api.test 11.11.11.11
expect blocked "TCP 53 to another public address" tcp 11.11.11.11 53
expect_count dns "$c"
ctl egress 80,443,8080 11.11.11.53 || bad "egress settings with 8080"
expect answered "TCP 8080 once egress_ports names it" tcp 11.11.11.11 8080
ctl egress 80,443 none || bad "egress settings without resolvers"
expect blocked "DNS with no resolver configured" dns api.test 11.11.11.53
ctl egress 80,443 11.11.11.53 || bad "egress settings back"

echo "# an App with egress none: nothing leaves but NFS while attached"
ctl sandbox-egress sbx_test1 "$ADDR1" none || bad "egress none"
c=$(counter policy)
expect blocked "none: TCP 443 to public" tcp 11.11.11.11 443
expect blocked "none: DNS to the resolver" dns api.test 11.11.11.53
expect answered "none: TCP 443 to the host (the callback API) stays open" tcp "$GW1" 443
expect blocked "none: TCP 8080 to the host" tcp "$GW1" 8080
expect_count policy "$c"
c=$(counter private)
expect blocked "none: private 10.99.0.10 still counted as private" tcp 10.99.0.10 80
expect_count private "$c"
expect blocked "none: metadata" tcp 169.254.169.254 80
ctl nfs sbx_test1 "$ADDR1" on || bad "nfs on (none)"
expect answered "none: TCP 2049 to the host while NFS is attached" tcp "$GW1" 2049
ctl nfs sbx_test1 "$ADDR1" off || bad "nfs off (none)"
ctl sandbox-egress sbx_test1 "$ADDR1" none || bad "egress none again"
expect blocked "none, set twice: still nothing" tcp 11.11.11.11 80

echo "# an allowlist App: CIDR entries, live change, two Apps"
ctl policy app_a 11.11.11.11/32:443 || bad "policy app_a"
ctl sandbox-egress sbx_test1 "$ADDR1" allowlist app_a || bad "egress allowlist"
expect answered "allowlist: 11.11.11.11:443 on the list" tcp 11.11.11.11 443
c=$(counter policy)
expect blocked "allowlist: 11.11.11.11:80 (port not on the list)" tcp 11.11.11.11 80
expect blocked "allowlist: 11.11.11.12 (not on the list)" tcp 11.11.11.12 443
# An allowlist Sandbox's DNS goes to sbx's forwarder on the host (port 5300), whatever resolver it
# names; this test runs none, so the host refuses instead of the world resolver answering.
expect refused "allowlist: DNS redirected to the host's forwarder, not to the resolver" dns api.test 11.11.11.53
nft list chain inet sbx prerouting | grep -q 'udp dport 53 redirect to :5300' &&
    ok "the redirect rule" || bad "prerouting: $(nft list chain inet sbx prerouting)"
# TCP DNS too (a resolver library retries there when an answer does not fit in UDP): the host's
# closed port 5300 answers, where the App's chain would have dropped it.
expect refused "allowlist: TCP DNS redirected to the host's forwarder too" tcp 11.11.11.53 53
nft list chain inet sbx prerouting | grep -q 'tcp dport 53 redirect to :5300' &&
    ok "the TCP redirect rule" || bad "prerouting: $(nft list chain inet sbx prerouting)"
expect_count policy "$c"
expect answered "allowlist: TCP 443 to the host (gateway)" tcp "$GW1" 443
ctl policy app_a 11.11.11.12/32 10.99.0.0/16 169.254.0.0/16 192.0.2.0/24 || bad "policy app_a changed"
expect answered "allowlist changed live: 11.11.11.12 now reachable" tcp 11.11.11.12 443
expect blocked "allowlist changed live: 11.11.11.11 no longer" tcp 11.11.11.11 443
expect blocked "allowlist: an entry port-less still only opens egress_ports" tcp 11.11.11.12 8080
c=$(counter private)
expect blocked "allowlist naming 10.99/16: private still blocked" tcp 10.99.0.10 80
expect_count private "$c"
expect blocked "allowlist naming 169.254/16: metadata still blocked" tcp 169.254.169.254 80
expect blocked "allowlist naming 192.0.2/24: special-use still blocked" tcp 192.0.2.10 80
ctl policy app_a 11.11.11.11/32 || bad "policy app_a again"

echo "# a second Sandbox, inbound and spoofing"
start_sandbox_process || bad "Sandbox 2 process"
SB2_PID=$NEW_PID
read -r IF2 ADDR2 GW2 < <(ctl attach sbx_test2 "$SB2_PID") || { bad "attach 2"; exit 1; }
ok "Sandbox 2: $IF2 $ADDR2 via $GW2"
[ "$ADDR1" != "$ADDR2" ] && [ "$IF1" != "$IF2" ] && ok "distinct slots" || bad "slot shared"
nsenter -t "$SB1_PID" -n "$PROBE" serve --pidfile "$TMP/sb1.pid" --tcp 7000
SB_PID=$SB2_PID
# Into a Sandbox is judged first (whatever the pool's addresses): counted as inbound.
c=$(counter inbound)
expect blocked "Sandbox 2 to Sandbox 1" tcp "$ADDR1" 7000
expect_count inbound "$c"
expect blocked "Sandbox 2 to Sandbox 1, ICMP" icmp "$ADDR1"
c=$(counter inbound)
out=$("$PROBE" tcp "$ADDR1" 7000)
[ $? -eq 1 ] && ok "host to Sandbox 1 blocked ($out)" || bad "host reached Sandbox 1: $out"
expect_count inbound "$c"
# A pool address that is not Sandbox 2's own, nor Sandbox 1's: the next slot's (slots start at a
# random one, so a fixed address could be Sandbox 2's own).
base=${ADDR2%.*} last=${ADDR2##*.}
SPOOF="$base.$(((last + 4) % 256))"
[ "$SPOOF" = "$ADDR1" ] && SPOOF="$base.$(((last + 8) % 256))"
nsenter -t "$SB2_PID" -n ip addr add "$SPOOF/32" dev eth0
c=$(counter spoofed)
expect blocked "Sandbox 2 with a source address not its own ($SPOOF)" tcp 11.11.11.11 80 --bind "$SPOOF"
expect_count spoofed "$c"
expect answered "Sandbox 2 with its own address" tcp 11.11.11.11 80
ctl policy app_b 11.11.11.12/32 || bad "policy app_b"
ctl sandbox-egress sbx_test2 "$ADDR2" allowlist app_b || bad "Sandbox 2 allowlist app_b"
expect answered "app_b's Sandbox reaches app_b's 11.11.11.12" tcp 11.11.11.12 443
expect blocked "app_b's Sandbox does not reach app_a's 11.11.11.11" tcp 11.11.11.11 443
SB_PID=$SB1_PID
expect answered "app_a's Sandbox reaches app_a's 11.11.11.11" tcp 11.11.11.11 443
expect blocked "app_a's Sandbox does not reach app_b's 11.11.11.12" tcp 11.11.11.12 443
ctl sandbox-egress sbx_test1 "$ADDR1" public || bad "Sandbox 1 back to public"
expect answered "back to public: 11.11.11.12 reachable again" tcp 11.11.11.12 443
ctl sandbox-egress sbx_test2 "$ADDR2" public || bad "Sandbox 2 back to public"
SB_PID=$SB2_PID

# Spoofing another Sandbox's live connection: Sandbox 1 has a UDP flow to the world (replied, so
# conntrack holds it as established); Sandbox 2 sends datagrams with Sandbox 1's address and
# port, which match that conntrack entry. They must be dropped as spoofed, not accepted as part of
# an established connection: none may reach the world.
ip netns exec "$W" nft -f - <<'EOF'
table ip world {
    chain input {
        type filter hook input priority 0;
        udp dport 53 ip saddr 11.0.0.1 counter
    }
}
EOF
world_udp() { ip netns exec "$W" nft list chain ip world input | awk '/counter/ { for (i = 1; i <= NF; i++) if ($i == "packets") print $(i + 1) }'; }
# UDP to a public address goes only to a resolver (egress): 11.11.11.11 is one for this part.
ctl egress 80,443 11.11.11.53,11.11.11.11 || bad "egress settings with 11.11.11.11 as a resolver"
SB_PID=$SB1_PID
expect answered "Sandbox 1's UDP flow to the world (port 40053)" udp 11.11.11.11 53 --sport 40053
SB_PID=$SB2_PID
nsenter -t "$SB2_PID" -n ip addr add "$ADDR1/32" dev eth0
c=$(counter spoofed)
w=$(world_udp)
expect blocked "Sandbox 2 as Sandbox 1 inside its established flow" udp 11.11.11.11 53 --bind "$ADDR1" --sport 40053
expect blocked "a flood of 500 such datagrams" udp 11.11.11.11 53 --bind "$ADDR1" --sport 40053 --count 500
now=$(counter spoofed)
[ "$now" -ge $((c + 501)) ] && ok "all 501 counted as spoofed ($c -> $now)" ||
    bad "spoofed datagrams not all dropped as spoofed ($c -> $now)"
[ -n "$w" ] && [ "$w" -gt 0 ] && [ "$(world_udp)" = "$w" ] && ok "none reached the world ($w datagrams from the uplink before and after)" ||
    bad "spoofed datagrams reached the world ($w -> $(world_udp))"
nsenter -t "$SB2_PID" -n ip addr del "$ADDR1/32" dev eth0
SB_PID=$SB1_PID
expect answered "Sandbox 1's flow still works" udp 11.11.11.11 53 --sport 40053
ctl egress 80,443 11.11.11.53 || bad "egress settings back"
SB_PID=$SB2_PID

"$CTL" ro-metrics | grep -q '^sbx_firewall_dropped_packets_total{reason="spoofed"} [1-9]' &&
    ok "drops exported for /metrics" || bad "metrics: $("$CTL" ro-metrics)"

echo "# the table as sbxctl shows it"
LIST=$(ctl list) || bad "list"
echo "$LIST" | grep -q "$IF1 . $ADDR1 -> sbx_test1" && ok "owner of Sandbox 1's element listed" ||
    bad "list lacks Sandbox 1: $LIST"
echo "$LIST" | grep -q 'iifname "sbx\*" jump sandbox_to_host' && ok "list prints nft syntax" ||
    bad "list output: $LIST"
nft list table inet sbx | grep -q "\"$IF2\" . $ADDR2 comment \"sbx_test2\"" &&
    ok "nft sees Sandbox 2's element with its owner" || bad "nft: $(nft list set inet sbx sandboxes)"

echo "# a worker with another pool replaces the table in one batch, carrying the elements over"
ctl policy app_b 11.11.11.12/32 || bad "policy app_b again"
ctl sandbox-egress sbx_test2 "$ADDR2" allowlist app_b || bad "Sandbox 2 allowlist before the change"
"$CTL" -p 10.213.0.0/23 init && nft list chain inet sbx postrouting | grep -q "10.213.0.0/23" &&
    ok "pool change rebuilt the table" || bad "pool change"
nft list set inet sbx sandboxes | grep -q "comment \"sbx_test2\"" && ok "elements carried over" ||
    bad "elements lost: $(nft list set inet sbx sandboxes)"
nft list set inet sbx egress_ports | grep -q "80, 443" && nft list set inet sbx resolvers | grep -q 11.11.11.53 &&
    ok "egress_ports and resolvers carried over" || bad "egress sets lost: $(nft list set inet sbx egress_ports)"
expect blocked "an allowlist Sandbox fails closed across the replacement (its App chain is gone)" tcp 11.11.11.12 443
ctl init && nft list chain inet sbx postrouting | grep -q "10.213.0.0/24" && ok "and back" ||
    bad "pool back"
ctl sandbox-egress sbx_test2 "$ADDR2" public || bad "Sandbox 2 public again"
expect answered "Sandbox 2 still reaches the public address" tcp 11.11.11.11 80

echo "# termination and reconciliation"
ctl release sbx_test1 "$ADDR1" || bad "release 1"
ip link show "$IF1" >/dev/null 2>&1 && bad "$IF1 still exists" || ok "release removed $IF1"
ctl list | grep -q "sbx_test1" && bad "element of Sandbox 1 left" || ok "release removed Sandbox 1's element"
ctl release sbx_test1 "$ADDR1" && ok "release is idempotent" || bad "second release failed"
start_sandbox_process || bad "Sandbox 3 process"
SB3_PID=$NEW_PID
read -r IF3 ADDR3 GW3 < <(ctl attach sbx_test3 "$SB3_PID") || bad "attach 3"
read -r IF5 _ < <(ctl tap sbx_test5) || bad "tap 5"
ctl release sbx_test5 || bad "release without an address"
ip link show "$IF5" >/dev/null 2>&1 && bad "$IF5 left" || ok "release by owner alone removed $IF5"
ctl list | grep -q "sbx_test5" && bad "element of sbx_test5 left" || ok "and its element"
HELD=$(ctl tap-held sbx_test6) || bad "a tap held by a fork: $HELD"
grep -q "busy, then opened after" <<<"$HELD" && ok "a tap held by a fork is waited for: ${HELD//$'\n'/; }" ||
    bad "a tap held by a fork: $HELD"
ctl release sbx_test6 || bad "release 6"
TAP_OUT=$(ctl tap sbx_test4) && ok "tap: $TAP_OUT" || bad "tap"
read -r IF4 _ <<<"$TAP_OUT"
rep=$(ctl reconcile sbx_test2 sbx_test3 sbx_test4)
[ "$rep" = "links 0 elements 0" ] && ok "reconcile keeps live Sandboxes" || bad "reconcile removed live: $rep"
rep=$(ctl reconcile sbx_test3)
[ "$rep" = "links 2 elements 2" ] && ok "reconcile removed Sandbox 2 and the tap ($rep)" ||
    bad "reconcile: $rep"
ip link show "$IF4" >/dev/null 2>&1 && bad "tap $IF4 left" || ok "tap removed"
ctl list | grep -q "sbx_test2" && bad "Sandbox 2's element left" || ok "Sandbox 2's element removed"
ctl list | grep -q "sbx_test3" && ok "Sandbox 3 kept" || bad "Sandbox 3 lost"

echo "# reconciliation against the store (what the workers recorded as live)"
DB="$TMP/sbx.db"
LIVE_ID=$("$CTL" store-insert "$DB") || bad "store-insert"
DEAD_ID=$("$CTL" store-insert "$DB") || bad "store-insert"
start_sandbox_process || bad "Sandbox 7 process"
read -r IF7 ADDR7 _ < <(ctl attach "$LIVE_ID" "$NEW_PID") || bad "attach live"
start_sandbox_process || bad "Sandbox 8 process"
read -r IF8 ADDR8 _ < <(ctl attach "$DEAD_ID" "$NEW_PID") || bad "attach dead"
read -r IF9 _ < <(ctl tap sbx_never_recorded) || bad "tap unrecorded"
"$CTL" store-finish "$DB" "$DEAD_ID" || bad "store-finish"
rep=$(ctl store-reconcile "$DB")
# Sandbox 3 (sbx_test3) is not in this store either: it goes too.
[ "$rep" = "links 3 elements 3" ] && ok "store reconcile removed the terminated and unknown ($rep)" ||
    bad "store reconcile: $rep"
ip link show "$IF7" >/dev/null 2>&1 && ok "the live Sandbox's link kept" || bad "live link removed"
ctl list | grep -q "$LIVE_ID" && ok "the live Sandbox's element kept" || bad "live element removed"
ip link show "$IF8" >/dev/null 2>&1 && bad "terminated Sandbox's link kept" || ok "terminated Sandbox's link removed"
ip link show "$IF9" >/dev/null 2>&1 && bad "unrecorded tap kept" || ok "unrecorded tap removed"
ctl release "$LIVE_ID" "$ADDR7" || bad "release live"
start_sandbox_process || bad "Sandbox 3 again"
SB3_PID=$NEW_PID
read -r IF3 ADDR3 GW3 < <(ctl attach sbx_test3 "$SB3_PID") || bad "attach 3 again"

echo "# a VMM in a namespace of its own (Firecracker's jailer --netns): tap bridged to the veth"
V=sbxv$$
G=sbxg$$
ip netns add "$V"
ip netns add "$G"
read -r IF6 ADDR6 GW6 < <(ctl bridged sbx_test6 "/run/netns/$V" tap0) || bad "bridged"
ip -n "$V" -o link show tap0 | grep -q "master br0" && ip -n "$V" -o link show eth0 | grep -q "master br0" &&
    ok "tap0 and eth0 bridged on br0 in the VMM's namespace" || bad "bridge: $(ip -n "$V" -o link)"
[ "$(ip netns exec "$V" cat /sys/class/net/tap0/owner)" = 4242 ] && ok "tap0 owned by the VMM's uid" ||
    bad "tap0 owner"
[ -z "$(ip -n "$V" -4 -o addr show | grep -v ' lo ')" ] && ok "no address in the VMM's namespace" ||
    bad "addresses in the VMM namespace"
# The guest: a namespace plugged into the bridge as the tap would be, with the Sandbox address.
ip link add gport netns "$V" type veth peer name geth0 netns "$G"
ip -n "$V" link set gport master br0 up
ip -n "$G" addr add "$ADDR6/30" dev geth0
ip -n "$G" link set geth0 up
ip -n "$G" route add default via "$GW6"
SB_NETNS=$G
expect answered "guest: TCP 443 to the host" tcp "$GW6" 443
expect blocked "guest: TCP 8080 to the host" tcp "$GW6" 8080
expect blocked "guest: TCP to private 10.99.0.10" tcp 10.99.0.10 80
expect answered "guest: TCP to public 11.11.11.11" tcp 11.11.11.11 80
unset SB_NETNS
ctl release sbx_test6 "$ADDR6" || bad "release 6"
ip link show "$IF6" >/dev/null 2>&1 && bad "$IF6 left" || ok "release removed $IF6"
ip -n "$V" link show eth0 >/dev/null 2>&1 && bad "eth0 left in the VMM namespace" || ok "and its eth0"
ip netns del "$G"
ip netns del "$V"

echo "# stopping: only sbx's table goes; control probes without it"
ctl destroy || bad "destroy"
nft list table inet sbx >/dev/null 2>&1 && bad "table inet sbx still there" || ok "table inet sbx deleted"
[ "$(nft list table ip foreign)" = "$FOREIGN_BEFORE" ] && ok "foreign table untouched" ||
    bad "foreign table changed"
SB_PID=$SB3_PID
expect answered "control: TCP 8080 to the host without the firewall" tcp "$GW3" 8080
expect answered "control: private 10.99.0.10 without the firewall" tcp 10.99.0.10 80
expect answered "control: metadata without the firewall" tcp 169.254.169.254 80
ip -6 addr add fd00:5c::1/64 dev "$IF3" nodad
nsenter -t "$SB_PID" -n ip -6 addr add fd00:5c::2/64 dev eth0 nodad
expect answered "control: IPv6 without the firewall" tcp fd00:5c::1 443

echo "# $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
