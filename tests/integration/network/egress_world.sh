#!/bin/bash
# egress_world.sh: the packet test world for the end-to-end egress test (issue 15), in the network
# and mount namespace the test runs in (tests/worker.cmake starts it under unshare --net --mount):
# a "world" namespace behind the host's uplink with public addresses (11.11.11.11 to .13, TCP
# listeners on 80, 443 and 8080 that say "hello <address> from <peer>") and a DNS resolver on
# 11.11.11.53 (Debian's dnsmasq, TTL 2 s) answering api.test, alt.test, other.test and wild.test with its
# subdomains, and a second resolver on 11.11.11.54 that is not in dns_resolvers (a server of the
# agent's choosing: it answers every name with 11.11.11.13, so an answer from it is recognisable).
# Nothing leaves the machine.
#   egress_world.sh up DIR NET_PROBE     (pid files in DIR)
#   egress_world.sh down DIR
set -u
W=sbxew
DIR=$2
case "$1" in
up)
    PROBE=$3
    ip link set lo up
    # The world's name lives in /run/netns, which the host's other test runs (other build trees)
    # share: in a mount namespace of our own, a tmpfs there keeps this run's "sbxew" apart. Never
    # in the host's mount namespace, whose named namespaces it would hide.
    if [ "$(readlink /proc/self/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ]; then
        mkdir -p /run/netns && mount -t tmpfs -o mode=0755 sbx-egress-world /run/netns || exit 1
    fi
    ip netns add "$W" || exit 1
    ip -n "$W" link set lo up
    ip link add up0 type veth peer name up0w netns "$W"
    ip addr add 11.0.0.1/30 dev up0
    ip link set up0 up
    ip -n "$W" addr add 11.0.0.2/30 dev up0w
    ip -n "$W" link set up0w up
    ip route add default via 11.0.0.2
    for a in 11.11.11.11 11.11.11.12 11.11.11.13 11.11.11.53 11.11.11.54; do ip -n "$W" addr add $a/32 dev lo; done
    ip netns exec "$W" "$PROBE" serve --pidfile "$DIR/world.pid" --tcp 80,443,8080 || exit 1
    ip netns exec "$W" dnsmasq --conf-file=/dev/null --no-resolv --no-hosts --bind-interfaces \
        --listen-address=11.11.11.53 --user=root --group=root --pid-file="$DIR/dns.pid" \
        --local-ttl=2 --address=/api.test/11.11.11.11 --address=/alt.test/11.11.11.12 \
        --address=/wild.test/11.11.11.12 --address=/other.test/11.11.11.13 || exit 1
    ip netns exec "$W" dnsmasq --conf-file=/dev/null --no-resolv --no-hosts --bind-interfaces \
        --listen-address=11.11.11.54 --user=root --group=root --pid-file="$DIR/rogue-dns.pid" \
        --local-ttl=2 --address=/#/11.11.11.13 || exit 1
    ;;
down)
    for f in "$DIR/world.pid" "$DIR/dns.pid" "$DIR/rogue-dns.pid"; do [ -f "$f" ] && kill "$(cat "$f")" 2>/dev/null; done
    ip netns del "$W" 2>/dev/null
    ;;
esac
exit 0
