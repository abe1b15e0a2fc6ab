#!/usr/bin/env bash
# bench/killplot.sh BUILD OUT IMG: admissions over time against the cap while
# the supervisor and tallyd are killed with -9 (strict durability). One tenant,
# 20 links, endpoint `search` capped at CAP per day for the whole tenant; CAP is
# about 10 s of the measured rate, so the cap is reached mid-run. Load: 20
# connections x 4 in flight for 20 s, re-dialling after a kill. Kills: the
# supervisor at 4 s and 12 s, tallyd at 8 s and 15 s (restarted 0.3 s later).
# Writes OUT/kill-timeline.txt, OUT/kill-marks.txt and IMG/kill9.png; prints
# the admitted total against the cap.
set -euo pipefail
B=$1
OUT=$2
IMG=$3
SRV_CPU=${SRV_CPU:-0}
CLI_CPU=${CLI_CPU:-1}
W=$(mktemp -d /tmp/tally-kill.XXXXXX)
TPID=""
trap '[ -n "$TPID" ] && kill "$TPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT

mkdir_data() { # DIR [--tenant-limit CAP/1d]
    local d=$1
    shift
    "$B/cli/tally" --data "$d" init >/dev/null
    "$B/cli/tally" --data "$d" plan set pro --limit 4000000000/1d >/dev/null
    "$B/cli/tally" --data "$d" endpoint set search --limit 1000000000/1d "$@" >/dev/null
    "$B/bench/tally-bench-links" --data "$d" --plan pro --tenants 1 --links 20 --out "$d.tok"
}
start() {
    taskset -c "$SRV_CPU" "$B/cli/tallyd" --data "$1" --http 127.0.0.1:0 2>>"$W/tallyd.log" &
    TPID=$!
    for _ in $(seq 1 200); do [ -S "$1/tally.sock" ] && return 0; sleep 0.02; done
}
load() { # DIR SECONDS [--timeline FILE]
    local d=$1 s=$2
    shift 2
    taskset -c "$CLI_CPU" "$B/bench/tally-bench" --socket "$d/tally.sock" --tokens "$d.tok" \
        --connections 20 --pipeline 4 --requests 100000000 --seconds "$s" "$@"
}

# Calibrate: the rate of this setup with no cap.
mkdir_data "$W/cal"
start "$W/cal"
load "$W/cal" 2 >/dev/null 2>&1
rate=$(load "$W/cal" 3 2>/dev/null | sed -nE 's/.*decisions_per_s=([0-9]+).*/\1/p')
kill "$TPID"
wait "$TPID" 2>/dev/null || true
CAP=$((rate * 10))
echo "== kill -9 run: calibrated rate ${rate}/s, cap ${CAP} per day for the tenant"

mkdir_data "$W/k" --tenant-limit "$CAP/1d"
start "$W/k"
marks="$OUT/kill-marks.txt"
: >"$marks"
t0=$(date +%s%N)
load "$W/k" 20 --timeline "$OUT/kill-timeline.txt" >"$W/load.out" 2>&1 &
lpid=$!
at() { # SECONDS: sleep until SECONDS after t0
    local now
    now=$(date +%s%N)
    sleep "$(awk -v t="$1" -v n="$now" -v z="$t0" 'BEGIN {d = t - (n - z) / 1e9; print (d > 0 ? d : 0)}')"
}
mark() { awk -v n="$(date +%s%N)" -v z="$t0" -v l="$1" 'BEGIN {printf "%.2f %s\n", (n - z) / 1e9, l}' >>"$marks"; }
kill_sup() {
    local s
    s=$(pgrep -P "$TPID" -f -- "--supervise " | head -1 || true) # not the fork server
    [ -n "$s" ] && kill -9 "$s" && mark "supervisor"
}
kill_tallyd() {
    kill -9 "$TPID"
    wait "$TPID" 2>/dev/null || true
    mark "tallyd"
    sleep 0.3
    start "$W/k"
}
at 4
kill_sup
at 8
kill_tallyd
at 12
kill_sup
at 15
kill_tallyd
wait "$lpid" || true
kill "$TPID"
wait "$TPID" 2>/dev/null || true
TPID=""
cat "$W/load.out"
adm=$(awk '!/^#/ {s += $2} END {print s}' "$OUT/kill-timeline.txt")
echo "admitted ${adm} of cap ${CAP} ($( [ "$adm" -le "$CAP" ] && echo "within the cap" || echo "OVER THE CAP"))"
echo "$CAP $adm" >"$OUT/kill-cap.txt"

gnuplot <<GP
set terminal pngcairo size 1200,480 font "sans,10"
set output "$IMG/kill9.png"
set title "Admissions per 100 ms and in total against the cap, strict durability, kill -9 of supervisor and tallyd (cap ${CAP}/day, admitted ${adm})"
set xlabel "seconds"
set ylabel "answers per 100 ms"
set y2label "admitted in total"
set ytics nomirror
set y2tics
set y2range [0:${CAP} * 1.15]
set yrange [0:*]
set key outside bottom center horizontal
set xrange [0:21]
set style fill solid 0.6 noborder
set grid xtics
plot "$OUT/kill-timeline.txt" using (\$1 + 0.05):2 with boxes lc rgb "#2a9d8f" title "admitted / 100 ms", \
     "" using (\$1 + 0.05):(\$3) with lines lc rgb "#e9c46a" title "refused / 100 ms", \
     "" using (\$1 + 0.05):(\$4) with lines lc rgb "#999999" title "unavailable / 100 ms", \
     "" using (\$1 + 0.1):2 smooth cumulative axes x1y2 with lines lw 2 lc rgb "#264653" title "admitted in total", \
     ${CAP} axes x1y2 with lines dt 2 lw 2 lc rgb "#e63946" title "cap", \
     "$marks" using 1:(0):(0):(${CAP} * 1.1) axes x1y2 with vectors nohead dt 3 lc rgb "#9b2226" notitle, \
     "$marks" using 1:(${CAP} * 1.12):2 axes x1y2 with labels font ",9" tc rgb "#9b2226" notitle
GP
echo "picture: $IMG/kill9.png"
