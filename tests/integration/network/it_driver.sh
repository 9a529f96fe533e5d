#!/bin/bash
# it_driver.sh: a Sandbox started by the workers' own path (the process driver's boot) gets exactly
# the network rules of issue 5, and terminate and reap remove its state (issue 5, "done when").
#
# Runs in a network and mount namespace of its own (tests/network.cmake: unshare --net --mount),
# which plays the host; a "world" namespace holds a public address (11.11.11.11) and a private one
# (10.99.0.10) and metadata (169.254.169.254) and a DNS resolver (11.11.11.53, Debian's dnsmasq
# answering api.test); nothing leaves the machine. The Sandbox's own programs (the rootfs's
# busybox) resolve through the /etc/resolv.conf the driver gives it (issue 15).
# Usage: it_driver.sh NET_DRIVER_CHECK NET_PROBE ROOTFS
set -u
CHECK=$1
PROBE=$2
ROOTFS=$3
POOL=10.213.0.0/24
W=sbxdw$$
TMP=$(mktemp -d /tmp/sbx-it-driver.XXXXXX)
chmod 755 "$TMP"
FAILS=0
cleanup() {
    for f in "$TMP"/*.pid; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    ip netns del "$W" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
ok() { echo "ok - $*"; }
bad() { echo "FAIL - $*"; FAILS=$((FAILS + 1)); }
probe() { nsenter -t "$SB_PID" -n "$PROBE" "$@" >/dev/null 2>&1; }
answered() { probe "${@:2}" && ok "$1" || bad "$1: no answer"; }
blocked() {
    probe "${@:2}"
    [ $? -eq 1 ] && ok "$1" || bad "$1: not silently dropped"
}

ip link set lo up
ip netns add "$W"
ip -n "$W" link set lo up
ip link add up0 type veth peer name up0w netns "$W"
ip addr add 11.0.0.1/30 dev up0
ip link set up0 up
ip -n "$W" addr add 11.0.0.2/30 dev up0w
ip -n "$W" link set up0w up
ip route add default via 11.0.0.2
for a in 11.11.11.11 11.11.11.53 10.99.0.10 169.254.169.254; do ip -n "$W" addr add $a/32 dev lo; done
ip netns exec "$W" "$PROBE" serve --pidfile "$TMP/world.pid" --tcp 80,8080 || exit 1
ip netns exec "$W" dnsmasq --conf-file=/dev/null --no-resolv --no-hosts --bind-interfaces \
    --listen-address=11.11.11.53 --user=root --group=root --pid-file="$TMP/dns.pid" \
    --address=/api.test/11.11.11.11 || exit 1
export SBX_DNS_RESOLVERS=11.11.11.53 SBX_EGRESS_PORTS=80,443
# In the Sandbox: its mount, network and pid namespaces, its uid (net_driver_check's 4242).
in_sandbox() { nsenter -t "$SB_PID" -m -n -p -S 4242 -G 4343 "$@" 2>&1; }
"$PROBE" serve --pidfile "$TMP/host.pid" --tcp 443,2049,8080 || exit 1

for how in terminate reap; do
    echo "# a Sandbox booted by the process driver, ended by $how"
    coproc DRV { "$CHECK" "$ROOTFS" "$TMP" "$POOL" 2>&1; }
    read -r SB_PID ADDR ID <&"${DRV[0]}" || { bad "boot"; break; }
    [ "$ADDR" != "-" ] && ok "booted $ID: pid $SB_PID, address $ADDR" || { bad "no address: $SB_PID $ADDR $ID"; break; }
    GW=$(nsenter -t "$SB_PID" -n ip -4 route show default | awk '{print $3}')
    IF=$(ip -o -4 addr show to "$GW" | awk '{print $2}' | cut -d@ -f1)
    nft list set inet sbx sandboxes | grep -q "\"$IF\" . $ADDR comment \"$ID\"" &&
        ok "element $IF . $ADDR owned by $ID" || bad "no element for $ID: $(nft list set inet sbx sandboxes)"
    [ "$(ip -o link show "$IF" | grep -o "alias $ID")" = "alias $ID" ] && ok "$IF carries alias $ID" ||
        bad "$IF alias: $(ip -o link show "$IF")"
    answered "TCP 443 to the host" tcp "$GW" 443
    blocked "TCP 8080 to the host" tcp "$GW" 8080
    blocked "TCP 2049 to the host (no NFS)" tcp "$GW" 2049
    blocked "TCP to private 10.99.0.10" tcp 10.99.0.10 80
    blocked "TCP to metadata" tcp 169.254.169.254 80
    answered "TCP to public 11.11.11.11" tcp 11.11.11.11 80
    blocked "TCP 8080 to public 11.11.11.11 (not in egress_ports)" tcp 11.11.11.11 8080
    grep -q "^nameserver 11.11.11.53$" "/proc/$SB_PID/root/etc/resolv.conf" &&
        ok "the Sandbox's /etc/resolv.conf names the resolver" ||
        bad "resolv.conf: $(cat "/proc/$SB_PID/root/etc/resolv.conf")"
    out=$(in_sandbox /bin/sh -c 'echo nameserver 1.1.1.1 > /etc/resolv.conf')
    [ $? -ne 0 ] && ok "and cannot change it ($out)" || bad "the Sandbox wrote its resolv.conf"
    out=$(in_sandbox /bin/busybox nslookup api.test)
    echo "$out" | grep -q "11.11.11.11" && ok "a program of the image resolves api.test" ||
        bad "nslookup in the Sandbox: $out"
    out=$(echo | in_sandbox /bin/busybox nc -w 3 api.test 80)
    echo "$out" | grep -q "from" && ok "and connects to it by name ($out)" || bad "nc api.test 80: $out"
    blocked "DNS to another address" dns api.test 11.11.11.11
    "$PROBE" tcp "$ADDR" 80 >/dev/null
    [ $? -eq 1 ] && ok "no new connection from the host into the Sandbox" || bad "host reached the Sandbox"

    echo "$how" >&"${DRV[1]}"
    read -r result <&"${DRV[0]}"
    [ "$result" = done ] && ok "$how" || bad "$how: $result"
    wait "$DRV_PID" 2>/dev/null
    nft list set inet sbx sandboxes | grep -q "$ID" && bad "$how left the element" ||
        ok "$how removed the element"
    ip link show "$IF" >/dev/null 2>&1 && bad "$how left $IF" || ok "$how removed $IF"
done
nft list table inet sbx >/dev/null && ok "the table stays for other workers" || bad "table gone"
echo "# $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
