#!/bin/bash
# it_slots.sh: no two live Sandboxes share an address pair, also when several worker processes
# allocate at the same moment, and a full pool refuses cleanly (issue 5).
#
# Runs in a network namespace of its own (tests/network.cmake: unshare --net). 12 processes attach
# a Sandbox each, all at once, from a pool of 8 /30 slots (10.213.0.0/27): exactly 8 must succeed
# with 8 distinct interfaces and addresses, and 4 must fail saying the pool is exhausted. Then the
# 8 are released and the pool serves again. Usage: it_slots.sh NET_CTL
set -u
CTL=$1
POOL=10.213.0.0/27
TMP=$(mktemp -d /tmp/sbx-it-slots.XXXXXX)
FAILS=0
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    rm -rf "$TMP"
}
trap cleanup EXIT
ok() { echo "ok - $*"; }
bad() { echo "FAIL - $*"; FAILS=$((FAILS + 1)); }

ip link set lo up
# Workers starting together: one creates the table, the others find it (or lose the race on
# NLM_F_EXCL and look again); all of them succeed.
INITS=()
for i in $(seq 1 6); do
    "$CTL" -p $POOL init 2>"$TMP/init$i" &
    INITS+=("$!")
done
init_failures=0
for p in "${INITS[@]}"; do wait "$p" || init_failures=$((init_failures + 1)); done
[ "$init_failures" -eq 0 ] && ok "6 concurrent inits succeed" || bad "$init_failures inits failed: $(cat "$TMP"/init*)"
[ "$(nft list tables | grep -c 'table inet sbx')" -eq 1 ] && ok "one table" || bad "tables: $(nft list tables)"
for i in $(seq 1 12); do
    unshare --net -- sleep 600 </dev/null >/dev/null 2>&1 &
    PIDS+=("$!")
done
for p in "${PIDS[@]}"; do
    until [ "$(readlink /proc/$p/ns/net)" != "$(readlink /proc/self/ns/net)" ]; do sleep 0.01; done
done
# All at once: each attach is its own process, as each worker is.
i=0
ATTACHES=()
for p in "${PIDS[@]}"; do
    i=$((i + 1))
    "$CTL" -p $POOL attach "sbx_race$i" "$p" >"$TMP/out$i" 2>"$TMP/err$i" &
    ATTACHES+=("$!")
done
wait "${ATTACHES[@]}"
succeeded=$(cat "$TMP"/out* | grep -c .)
exhausted=$(cat "$TMP"/err* | grep -c "net_pool exhausted")
[ "$succeeded" -eq 8 ] && ok "8 of 12 attached" || bad "$succeeded attached: $(cat "$TMP"/err*)"
[ "$exhausted" -eq 4 ] && ok "4 refused: pool exhausted" || bad "$exhausted refused as exhausted"
[ "$(cat "$TMP"/out* | awk '{print $1}' | sort -u | wc -l)" -eq 8 ] && ok "8 distinct interfaces" ||
    bad "interfaces shared: $(cat "$TMP"/out*)"
[ "$(cat "$TMP"/out* | awk '{print $2}' | sort -u | wc -l)" -eq 8 ] && ok "8 distinct addresses" ||
    bad "addresses shared"
n=$(nft list set inet sbx sandboxes | grep -o 'comment "sbx_race[0-9]*"' | wc -l)
[ "$n" -eq 8 ] && ok "8 firewall elements" || bad "$n firewall elements"
# Each Sandbox sees only its own address.
for i in $(seq 1 12); do
    [ -s "$TMP/out$i" ] || continue
    read -r _ addr _ <"$TMP/out$i"
    got=$(nsenter -t "${PIDS[$((i - 1))]}" -n ip -4 -o addr show dev eth0 | awk '{print $4}')
    [ "$got" = "$addr/30" ] || bad "Sandbox $i has $got, expected $addr/30"
done
ok "each Sandbox has its own address on eth0"
for i in $(seq 1 12); do
    [ -s "$TMP/out$i" ] || continue
    read -r _ addr _ <"$TMP/out$i"
    "$CTL" -p $POOL release "sbx_race$i" "$addr" || bad "release $i"
done
[ -z "$(ip -o link show | grep -E ': sbx[0-9]+@')" ] && ok "all released" || bad "links left"
kill "${PIDS[11]}"
unshare --net -- sleep 600 </dev/null >/dev/null 2>&1 &
PIDS+=("$!")
until [ "$(readlink /proc/$!/ns/net)" != "$(readlink /proc/self/ns/net)" ]; do sleep 0.01; done
read -r _ again_addr _ < <("$CTL" -p $POOL attach sbx_again "$!") &&
    ok "the pool serves again after release" || bad "attach after release"
"$CTL" -p $POOL release sbx_again "$again_addr" || bad "release again"
"$CTL" -p $POOL attach sbx_host $$ 2>&1 | grep -q "host's network namespace" &&
    ok "a pid in the host's namespace is refused" || bad "host namespace not refused"
# A batch the kernel refuses is reported, and the attach leaves nothing behind: a table with the
# right comment but none of its sets (as if someone had emptied it by hand).
"$CTL" -p $POOL destroy
nft add table inet sbx "{ comment \"sbx firewall v7 pool $POOL: managed by sbx, do not edit\"; }"
unshare --net -- sleep 600 </dev/null >/dev/null 2>&1 &
PIDS+=("$!")
until [ "$(readlink /proc/$!/ns/net)" != "$(readlink /proc/self/ns/net)" ]; do sleep 0.01; done
out=$("$CTL" -p $POOL attach sbx_refused "$!" 2>&1)
echo "$out" | grep -q "batch refused at message 1 of 5: No such file or directory" &&
    ok "a refused batch is reported ($out)" || bad "refused batch: $out"
[ -z "$(ip -o link show | grep -E ': sbx[0-9]+@')" ] && ok "a failed attach leaves no link" ||
    bad "a failed attach left a link"
nft delete table inet sbx
echo "# $FAILS failure(s)"
[ "$FAILS" -eq 0 ]
