#!/usr/bin/env bash
# Cluster figures on one machine (127.0.0.1), release build, side by side in one run:
#   - decisions/s: one host alone against a cluster of three, the load spread over the three
#     hosts' sockets, for hot links (1 tenant, 100 links) and for the multi-tenant mix
#     (1,000 tenants, Zipf 1.1);
#   - lease messages per 1,000 admissions, summed over the hosts (/metrics);
#   - grant latency: a fresh link's first request on the leader and on a follower (its lease
#     comes from the leader over the cluster port), p50 and p99 over 200 links each;
#   - failover: kill -9 of the leader's tallyd, then the time to the first grant on a follower;
#   - the same grant latency with each host in a network namespace of its own (veth pairs on a
#     bridge: the cluster's traffic crosses a network stack), where namespaces can be made (root,
#     iproute2).
# Every host shares this machine's 2 CPUs: three tallyds and the load compete for them, so the
# "3 hosts" line measures what the cluster costs, not what three machines would give.
# Usage: bench/hosts.sh [BUILD_DIR]   (default build/bench, the build of bench/run)
set -euo pipefail
B=${1:-build/bench}
W=$(mktemp -d /tmp/tally-hosts.XXXXXX)
T="$B/cli/tally"
NS=tlyb-$$
cleanup() {
    pkill -f "tallyd --data $W" 2>/dev/null || true
    for n in sw h1 h2 h3; do ip netns del "$NS-$n" 2>/dev/null || true; done
    rm -rf "$W"
}
trap cleanup EXIT
cmake --build "$B" -j2 --target tallyd tally_cli tally-bench tally-bench-links >/dev/null

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() { # DIR HTTP_PORT
    "$B/cli/tallyd" --data "$1" --http "127.0.0.1:$2" 2>>"$1.log" &
    for _ in $(seq 1 200); do [ -S "$1/tally.sock" ] && return 0; sleep 0.05; done
    echo "tallyd did not start on $1" >&2; return 1
}

leader_of() { "$T" --data "$1" cluster status 2>/dev/null | awk 'NR==1 {print $6}'; }

wait_leader() { # DIR
    for _ in $(seq 1 100); do
        l=$(leader_of "$1"); [ -n "$l" ] && [ "$l" != 0 ] && return 0; sleep 0.1
    done
    echo "no leader seen by $1" >&2; return 1
}

metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

# configure DIR: the plans, the hot tenant's 100 links (DIR.hot), 1,000 tenants (DIR.mix)
configure() {
    "$T" --data "$1" init 2>/dev/null
    "$T" --data "$1" plan set pro --limit 1000000000/1h
    "$T" --data "$1" endpoint set search --limit 100000000/1h
    "$B/bench/tally-bench-links" --data "$1" --plan pro --tenants 1 --links 100 --prefix hot \
        --out "$1.hot" >/dev/null
    "$B/bench/tally-bench-links" --data "$1" --plan pro --tenants 1000 --links 1 --prefix m \
        --out "$1.mix" >/dev/null
    "$B/bench/tally-bench-links" --data "$1" --plan pro --tenants 1 --links 420 --prefix fresh \
        --out "$1.fresh" >/dev/null
}

# cluster N: hosts $W/cN/h1..hN, h1 configured then the first member, the others joined
cluster() {
    local n=$1 d="$W/c$1" i code
    mkdir -p "$d"
    configure "$d/h1"
    HTTP=()
    if [ "$n" -gt 1 ]; then
        "$T" --data "$d/h1" cluster init --listen "127.0.0.1:$(port)" >/dev/null
    fi
    HTTP[1]=$(port); start "$d/h1" "${HTTP[1]}"
    [ "$n" -gt 1 ] && wait_leader "$d/h1"
    for i in $(seq 2 "$n"); do
        code=$("$T" --data "$d/h1" cluster invite 2>/dev/null)
        "$T" --data "$d/h$i" cluster join "$code" --listen "127.0.0.1:$(port)" >/dev/null
        HTTP[$i]=$(port); start "$d/h$i" "${HTTP[$i]}"
    done
    for i in $(seq 1 "$n"); do [ "$n" -gt 1 ] && wait_leader "$d/h$i"; done
    return 0
}

# load N TOKENS ZIPF [REQUESTS]: checks spread over the N hosts at once (200,000 by default);
# prints the total rate. A first pass warms up (every tenant's supervisor started, its
# children's files made): the figure is the second one's.
load() {
    local n=$1 tok=$2 zipf=$3 total=${4:-200000} d="$W/c$1" i pids=() out rate=0 r
    [ -z "${4:-}" ] && load "$n" "$tok" "$zipf" 40000 >/dev/null
    for i in $(seq 1 "$n"); do
        args=(--socket "$d/h$i/tally.sock" --tokens "$d/h1.$tok" --connections 2 --pipeline 16
              --requests $((total / n)) --seed "$((i + total))" --timeout-ms 10000 --seconds 60)
        [ "$zipf" != 0 ] && args+=(--zipf "$zipf" --links-per-tenant 1)
        "$B/bench/tally-bench" "${args[@]}" >"$d.load$i" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p"; done
    for i in $(seq 1 "$n"); do
        out=$(tail -1 "$d.load$i")
        r=$(sed -n 's/.*decisions_per_s=\([0-9]*\).*/\1/p' <<<"$out")
        rate=$((rate + ${r:-0}))
    done
    echo "$rate"
}

messages() { # N: lease messages per 1,000 admissions, all hosts
    local n=$1 i m=0 a=0 v
    for i in $(seq 1 "$n"); do
        v=$(metric "${HTTP[$i]}" tally_lease_messages_total | cut -d. -f1)
        m=$((m + ${v:-0}))
        v=$(metric "${HTTP[$i]}" 'tally_decisions_total{result="admitted"}' | cut -d. -f1)
        a=$((a + ${v:-0}))
    done
    awk -v m="$m" -v a="$a" 'BEGIN {printf "%.1f", (a > 0 ? 1000 * m / a : 0)}'
}

# first_grants DIR HTTP_PORT FROM [NETNS [FRESH]]: the first check of 200 fresh links
# (FROM..FROM+199 of FRESH, default the 3-host cluster's), in ms; curl runs inside NETNS if given
first_grants() {
    local d=$1 p=$2 from=$3 ns=${4:-} fresh=${5:-$W/c3/h1.fresh} k tok run=()
    [ -n "$ns" ] && run=(ip netns exec "$ns")
    for k in $(seq "$from" $((from + 199))); do
        tok=$(sed -n "${k}p" "$fresh")
        "${run[@]}" curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer $tok" \
            -H 'X-Tally-Endpoint: search' "http://127.0.0.1:$p/v1/check"
    done | awk '{print $1 * 1000}' | sort -n |
        awk '{v[NR]=$1} END {printf "p50 %.2f ms  p99 %.2f ms", v[int(NR*0.5)], v[int(NR*0.99)]}'
}

echo "== decisions/s: 1 host against 3 hosts (load spread over every host's socket)"
cluster 1
h1=$(load 1 hot 0); m1=$(load 1 mix 1.1); msg1=$(messages 1)
pkill -f "tallyd --data $W/c1" || true; sleep 0.5
cluster 3
h3=$(load 3 hot 0); m3=$(load 3 mix 1.1); msg3=$(messages 3)
printf '%-28s %12s %12s %8s\n' "" "1 host" "3 hosts" "ratio"
awk -v a="$h1" -v b="$h3" 'BEGIN {printf "%-28s %12d %12d %8.2f\n", "hot links (1 tenant)", a, b, b / a}'
awk -v a="$m1" -v b="$m3" 'BEGIN {printf "%-28s %12d %12d %8.2f\n", "1,000 tenants, Zipf 1.1", a, b, b / a}'
echo "lease messages per 1,000 admissions: 1 host $msg1, 3 hosts $msg3"

echo "== a fresh link's first grant (a lease from the leader's supervisor)"
L=$(leader_of "$W/c3/h1"); F=$((L % 3 + 1))
# The tenant's first request starts its supervisor, whose start asks ahead for its first 16
# links: the links measured come after those.
curl -s -o /dev/null -H "Authorization: Bearer $(head -1 "$W/c3/h1.fresh")" \
    -H 'X-Tally-Endpoint: search' "http://127.0.0.1:${HTTP[$L]}/v1/check"
echo "on the leader (host $L):   $(first_grants "$W/c3/h$L" "${HTTP[$L]}" 17)"
echo "on a follower (host $F):   $(first_grants "$W/c3/h$F" "${HTTP[$F]}" 217)"

echo "== failover: kill -9 of the leader's tallyd, then the first grant on a follower"
pid=$(pgrep -f "tallyd --data $W/c3/h$L " | head -1)
tok=$("$T" --data "$W/c3/h1" link create hot1 2>/dev/null || true)
sleep 1.5 # the new link is on every host
t0=$(date +%s%N)
kill -9 "$pid"
until [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $tok" \
    -H 'X-Tally-Endpoint: search' "http://127.0.0.1:${HTTP[$F]}/v1/check")" = 200 ]; do
    sleep 0.02
done
echo "first grant on host $F $(( ($(date +%s%N) - t0) / 1000000 )) ms after the kill"

# netns_cluster: three hosts, each a namespace ($NS-h1..3, 10.214.0.1..3 on a bridge in $NS-sw),
# its data dir $W/n/hI and its tallyd (HTTP on 127.0.0.1:8080 inside its namespace)
netns_cluster() {
    local d="$W/n" i code
    mkdir -p "$d"
    ip netns add "$NS-sw"
    ip -n "$NS-sw" link add br0 type bridge
    ip -n "$NS-sw" link set br0 up
    for i in 1 2 3; do
        ip netns add "$NS-h$i"
        ip -n "$NS-h$i" link set lo up
        ip link add "vb$i-$$" netns "$NS-h$i" type veth peer name "pb$i-$$" netns "$NS-sw"
        ip -n "$NS-sw" link set "pb$i-$$" master br0
        ip -n "$NS-sw" link set "pb$i-$$" up
        ip -n "$NS-h$i" link set "vb$i-$$" name eth0
        ip -n "$NS-h$i" addr add "10.214.0.$i/24" dev eth0
        ip -n "$NS-h$i" link set eth0 up
    done
    "$T" --data "$d/h1" init 2>/dev/null
    "$T" --data "$d/h1" plan set pro --limit 1000000000/1h
    "$T" --data "$d/h1" endpoint set search --limit 100000000/1h
    "$B/bench/tally-bench-links" --data "$d/h1" --plan pro --tenants 1 --links 420 \
        --prefix fresh --out "$d/h1.fresh" >/dev/null
    ip netns exec "$NS-h1" "$T" --data "$d/h1" cluster init --listen 10.214.0.1:7400 >/dev/null
    ip netns exec "$NS-h1" "$B/cli/tallyd" --data "$d/h1" --http 127.0.0.1:8080 2>>"$d/h1.log" &
    for _ in $(seq 1 200); do [ -S "$d/h1/tally.sock" ] && break; sleep 0.05; done
    wait_leader "$d/h1"
    for i in 2 3; do
        code=$("$T" --data "$d/h1" cluster invite 2>/dev/null)
        ip netns exec "$NS-h$i" "$T" --data "$d/h$i" cluster join "$code" \
            --listen "10.214.0.$i:7400" >/dev/null
        ip netns exec "$NS-h$i" "$B/cli/tallyd" --data "$d/h$i" --http 127.0.0.1:8080 \
            2>>"$d/h$i.log" &
    done
    for i in 1 2 3; do
        for _ in $(seq 1 200); do [ -S "$d/h$i/tally.sock" ] && break; sleep 0.05; done
        wait_leader "$d/h$i"
    done
}

echo "== across network namespaces: a fresh link's first grant, each host in a namespace"
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! ip netns add "$NS-probe" 2>/dev/null; then
    echo "skipped: network namespaces cannot be made here (needs root and iproute2)"
else
    ip netns del "$NS-probe"
    pkill -f "tallyd --data $W/c3" || true
    netns_cluster
    L=$(leader_of "$W/n/h1"); F=$((L % 3 + 1))
    ip netns exec "$NS-h$L" curl -s -o /dev/null -H "Authorization: Bearer $(head -1 "$W/n/h1.fresh")" \
        -H 'X-Tally-Endpoint: search' "http://127.0.0.1:8080/v1/check"
    echo "on the leader (host $L):   $(first_grants "$W/n/h$L" 8080 17 "$NS-h$L" "$W/n/h1.fresh")"
    echo "on a follower (host $F):   $(first_grants "$W/n/h$F" 8080 217 "$NS-h$F" "$W/n/h1.fresh")"
fi
