#!/usr/bin/env bash
# Lease figures for the supervisor issue, on the release build, side by side:
#   - lease round trips per 1,000 admissions at steady load (from /metrics);
#   - cold start of a supervisor: first-request latency for fresh tenants (p50, p99);
#   - strict against batched durability: throughput and latency of the same load.
# Placement follows BENCHMARKING.md: tallyd on CPU 0, the load on CPU 1.
# Usage: bench/leases.sh [BUILD_DIR]   (default build/release)
set -euo pipefail
B=${1:-build/release}
W=$(mktemp -d)
trap 'pkill -f "tallyd --data $W" 2>/dev/null || true; rm -rf "$W"' EXIT

setup() { # DIR TENANTS LINKS_PER_TENANT
    local d=$1 tenants=$2 links=$3 t i
    "$B/cli/tally" --data "$d" init 2>/dev/null
    "$B/cli/tally" --data "$d" plan set pro --limit 1000000000/1d --limit 100000000/1h
    "$B/cli/tally" --data "$d" endpoint set search --limit 100000000/1h
    for t in $(seq 1 "$tenants"); do
        "$B/cli/tally" --data "$d" tenant add "t$t" --plan pro
        for i in $(seq 1 "$links"); do "$B/cli/tally" --data "$d" link create "t$t"; done > "$d.t$t"
    done
}

start() { # DIR PORT DURABILITY
    taskset -c 0 "$B/cli/tallyd" --data "$1" --http "127.0.0.1:$2" --durability "$3" 2>"$1.log" &
    for _ in $(seq 1 200); do [ -S "$1/tally.sock" ] && return 0; sleep 0.05; done
    echo "tallyd did not start" >&2; return 1
}

metric() { curl -s "http://127.0.0.1:$1/metrics" | awk -v m="$2" '$1 == m {print $2}'; }

echo "== steady load: 100 links of one tenant, 1 connection x 16 in flight, 200,000 requests"
for mode in strict batched; do
    d="$W/steady-$mode"; setup "$d" 1 100
    start "$d" 18190 "$mode"
    taskset -c 1 "$B/bench/tally-bench" --socket "$d/tally.sock" --tokens "$d.t1" \
        --connections 1 --pipeline 16 --requests 20000 >/dev/null   # warm up
    line=$(taskset -c 1 "$B/bench/tally-bench" --socket "$d/tally.sock" --tokens "$d.t1" \
        --connections 1 --pipeline 16 --requests 200000)
    adm=$(metric 18190 'tally_decisions_total{result="admitted"}')
    msgs=$(metric 18190 tally_lease_messages_total)
    echo "$mode: $line"
    awk -v m="$msgs" -v a="$adm" -v mode="$mode" \
        'BEGIN {printf "%s: lease messages per 1,000 admissions: %.1f (%d messages, %d admitted)\n", mode, 1000*m/a, m, a}'
    pkill -f "tallyd --data $d" || true; sleep 0.3
done

echo "== cold start: first request of 40 fresh tenants (spawn + journal replay + first grant)"
d="$W/cold"; setup "$d" 40 1
start "$d" 18191 strict
for t in $(seq 1 40); do
    taskset -c 1 "$B/bench/tally-bench" --socket "$d/tally.sock" --tokens "$d.t$t" --requests 1 |
        sed -E 's/.*p50_us=([0-9.]+).*/\1/'
done | sort -n | awk '{v[NR]=$1} END {printf "cold start p50=%.0f us p99=%.0f us (n=%d)\n", v[int(NR*0.5)+1], v[NR], NR}'
pkill -f "tallyd --data $d" || true
