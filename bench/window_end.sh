#!/usr/bin/env bash
# bench/window_end.sh: many tenants across the end of every tenant's hourly
# windows (the top of the hour). Not part of bench/run: it waits for the clock.
#
# Data as in bench/tenants.sh: TENANTS tenants x 2 links on plan `pro`
# (1,000,000/1h), endpoint `search` (100,000/1h per link). tallyd (default
# settings) starts LEAD minutes before the next hour (waiting for that moment
# first) on CPU 0; tally-bench (Zipf ZIPF, 4 x 4) runs back-to-back STEP-second
# passes on CPU 1 until AFTER seconds past the hour. After each pass one line:
# the time it ended, decisions/s, p99, answers neither admitted nor refused,
# and from /metrics the supervisors live, the requests that waited for a lease
# and the supervisor starts so far. A kept lease lives to its window's end, so
# the passes around the hour show what a window end shared by every tenant
# costs.
#
# Environment: BENCH_BUILD, TENANTS (10000), ZIPF (1.1), LEAD (15), AFTER
# (150), STEP (10), NOW (1: start at once instead of waiting, for a check).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${BENCH_BUILD:-$ROOT/build/bench}
TENANTS=${TENANTS:-10000} ZIPF=${ZIPF:-1.1} LEAD=${LEAD:-15} AFTER=${AFTER:-150}
STEP=${STEP:-10} NOW=${NOW:-0}
W=$(mktemp -d /tmp/tally-window-end.XXXXXX)
TPID=""

cleanup() {
    if [ -n "$TPID" ]; then
        kill "$TPID" 2>/dev/null || true
        wait "$TPID" 2>/dev/null || true
    fi
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTALLY_WERROR=ON >/dev/null
cmake --build "$B" -j2 --target tallyd tally_cli tally-bench tally-bench-links >/dev/null

now=$(date +%s)
hour=$(((now / 3600 + 1) * 3600))
if [ "$NOW" = 1 ]; then
    hour=$((now + LEAD * 60))
elif [ $((hour - now)) -lt $((LEAD * 60)) ]; then
    hour=$((hour + 3600))
fi
start=$((hour - LEAD * 60))
what="the windows end at"
[ "$NOW" = 1 ] && what="a check, no window end; offsets from"
echo "== $TENANTS tenants x 2 links, Zipf $ZIPF; $what $(date -u -d "@$hour" +%T) UTC;" \
    "tallyd starts at $(date -u -d "@$start" +%T)"
[ "$start" -gt "$(date +%s)" ] && sleep $((start - $(date +%s)))

D="$W/data"
"$B/cli/tally" --data "$D" init >/dev/null 2>&1
"$B/cli/tally" --data "$D" plan set pro --limit 1000000/1h >/dev/null
"$B/cli/tally" --data "$D" endpoint set search --limit 100000/1h >/dev/null
"$B/bench/tally-bench-links" --data "$D" --plan pro --tenants "$TENANTS" --links 2 \
    --out "$W/tok"
taskset -c 0 "$B/cli/tallyd" --data "$D" --http 127.0.0.1:0 2>"$W/tallyd.log" &
TPID=$!
for _ in $(seq 1 600); do
    [ -S "$D/tally.sock" ] && break
    sleep 0.05
done
HTTP=$(sed -nE 's/.*"event":"start".*"http":"([^"]+)".*/\1/p' "$W/tallyd.log" | head -1)

metrics() {
    curl -s --max-time 5 "http://$HTTP/metrics" | awk '
        $1 == "tally_supervisors_live" { s = $2 }
        $1 == "tally_waits_total" { w = $2 }
        $1 == "tally_supervisor_events_total{event=\"start\"}" { st = $2 }
        END { printf "supervisors %s  waited %s  starts %s", s, w, st }' || true
}

i=0
while [ "$(date +%s)" -lt $((hour + AFTER)) ]; do
    line=$(timeout $((STEP + 40)) taskset -c 1 "$B/bench/tally-bench" --socket "$D/tally.sock" \
        --tokens "$W/tok" --zipf "$ZIPF" --links-per-tenant 2 --draw-tenants "$TENANTS" \
        --seed $((10 + i)) --connections 4 --pipeline 4 --requests 50000000 --seconds "$STEP" \
        --timeout-ms 10000 2>>"$W/bench.err" | tail -1 || true)
    t=$(date +%s)
    f() { sed -nE "s/.*(^| )$1=([^ ]+).*/\\2/p" <<<"$line"; }
    printf '%s (%+5d s)  %9s dec/s  p99 %10s us  neither %s  %s\n' "$(date -u +%T)" \
        $((t - hour)) "$(f decisions_per_s)" "$(f p99_us)" "$(f other)" "$(metrics)"
    i=$((i + 1))
done
