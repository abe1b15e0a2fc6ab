#!/usr/bin/env bash
# Supervisor start figures, on a release build:
#   - first decision of fresh tenants, one after another (spawn + ledger creation + first grant);
#   - first decision of 50 fresh tenants at once (all 50 starts overlapping), and the wall time;
#   - PSS of each idle live supervisor (/proc/PID/smaps_rollup), and of tallyd and its helper.
# Usage: bench/spawn.sh [BUILD_DIR] [SEQ_TENANTS]   (default build/rel, 40)
set -euo pipefail
B=${1:-build/rel}
SEQ=${2:-40}
CONC=50
W=$(mktemp -d)
TPID=
trap '[ -n "$TPID" ] && kill "$TPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT

setup() { # DIR TENANTS
    local d=$1 t
    "$B/cli/tally" --data "$d" init >/dev/null 2>&1
    "$B/cli/tally" --data "$d" plan set pro --limit 1000000000/1d >/dev/null
    "$B/cli/tally" --data "$d" endpoint set search --limit 100000000/1h >/dev/null
    for t in $(seq 1 "$2"); do
        "$B/cli/tally" --data "$d" tenant add "t$t" --plan pro >/dev/null
        "$B/cli/tally" --data "$d" link create "t$t" >"$d.t$t"
    done
}

pct() { # LABEL: p50/p99/max of the numbers on stdin (us)
    sort -n | awk -v l="$1" '{v[NR]=$1} END {
        i99 = int(NR * 0.99 + 0.999); if (i99 < 1) i99 = 1
        printf "%s: p50=%.0f us p99=%.0f us max=%.0f us (n=%d)\n", l, v[int((NR + 1) / 2)], v[i99], v[NR], NR}'
}

d="$W/d"
setup "$d" $((SEQ + CONC))
"$B/cli/tallyd" --data "$d" --http 127.0.0.1:0 2>"$W/log" &
TPID=$!
for _ in $(seq 1 200); do [ -S "$d/tally.sock" ] && break; sleep 0.05; done
sleep 0.3 # tallyd's own start settles

echo "== first decision of $SEQ fresh tenants, one after another"
for t in $(seq 1 "$SEQ"); do
    "$B/bench/tally-bench" --socket "$d/tally.sock" --tokens "$d.t$t" --requests 1 |
        sed -E 's/.*p50_us=([0-9.]+).*/\1/'
done | pct "sequential first decision"

echo "== first decision of $CONC fresh tenants at once"
t0=$(date +%s%N)
for t in $(seq $((SEQ + 1)) $((SEQ + CONC))); do
    "$B/bench/tally-bench" --socket "$d/tally.sock" --tokens "$d.t$t" --requests 1 >"$W/c$t" &
done
wait $(jobs -p | grep -v "^$TPID$") 2>/dev/null || true
t1=$(date +%s%N)
cat "$W"/c* | sed -E 's/.*p50_us=([0-9.]+).*/\1/' | pct "concurrent first decision"
echo "all $CONC answered in $(((t1 - t0) / 1000)) us (wall, including $CONC tally-bench starts)"

echo "== PSS (kB), idle live supervisors"
sleep 0.5
sups=$(for p in $(pgrep -f -- "--supervise t[0-9]+ " || true); do
    [ -r /proc/"$p"/smaps_rollup ] && echo "$p"; done)
for p in $sups; do awk '/^Pss:/ {print $2}' /proc/"$p"/smaps_rollup; done |
    sort -n | awk '{v[NR]=$1; s+=$1} END {printf "supervisors: n=%d mean=%.0f kB p50=%d kB max=%d kB\n", NR, s/NR, v[int((NR+1)/2)], v[NR]}'
printf 'tallyd: %s kB\n' "$(awk '/^Pss:/ {print $2}' /proc/$TPID/smaps_rollup)"
for p in $(pgrep -f -- "--fork-server" || true); do
    printf 'fork server: %s kB\n' "$(awk '/^Pss:/ {print $2}' /proc/"$p"/smaps_rollup)"
done
