#!/usr/bin/env bash
# Supervisor start figures, on a release build:
#   - first decision of fresh tenants, one after another: 100 ms apart (an idle machine: the
#     fork server has spares waiting), timed by one tally-bench process per request and by one
#     client for all (--gap-ms: no process starts beside the request), then back to back
#     (a first turn in tallyd: the ledger and the child file made, the first grant committed;
#     the supervisor starts after the answer); and, as the floor under the idle figures,
#     decisions 100 ms apart of tenants already warm (no supervisor on the path);
#   - first decision of 50 fresh tenants at once (the starts overlap), and the wall time;
#   - PSS of each idle live supervisor (/proc/PID/smaps_rollup), of tallyd and of its fork server;
#   - how often the idle supervisors wake up (context switches over 5 s).
# Usage: bench/spawn.sh [BUILD_DIR] [SEQ_TENANTS] [TALLYD_FLAGS...]   (default build/rel, 40)
set -euo pipefail
B=${1:-build/rel}
SEQ=${2:-40}
shift 2 2>/dev/null || shift $#
CONC=50
W=$(mktemp -d)
TPID=
trap '[ -n "$TPID" ] && kill "$TPID" 2>/dev/null; wait 2>/dev/null; rm -rf "$W"' EXIT

setup() { # DIR TENANTS
    local d=$1 t
    "$B/cli/tally" --data "$d" init >/dev/null 2>&1
    "$B/cli/tally" --data "$d" plan set pro --limit 1000000000/1d >/dev/null
    "$B/cli/tally" --data "$d" endpoint set search --limit 100000000/1h >/dev/null
    "$B/cli/tally" --data "$d" endpoint set other --limit 100000000/1h >/dev/null
    for t in $(seq 1 "$2"); do
        "$B/cli/tally" --data "$d" tenant add "t$t" --plan pro >/dev/null
        "$B/cli/tally" --data "$d" link create "t$t" >"$d.t$t"
    done
}

pct() { # LABEL: p50/p99/max of the numbers on stdin (us); nothing when there are none
    sort -n | awk -v l="$1" '{v[NR]=$1} END {
        if (NR == 0) exit
        i99 = int(NR * 0.99 + 0.999); if (i99 < 1) i99 = 1
        printf "%s: p50=%.0f us p99=%.0f us max=%.0f us (n=%d)\n", l, v[int((NR + 1) / 2)], v[i99], v[NR], NR}'
}

first() { # TENANT: the latency of its first decision (us)
    "$B/bench/tally-bench" --socket "$d/tally.sock" --tokens "$d.t$1" --requests 1 |
        sed -E 's/.*p50_us=([0-9.]+).*/\1/'
}

first_gap() { # FROM TO GAP_MS: one client, one request per tenant FROM..TO, GAP_MS apart
    local t
    : >"$W/tokens"
    for t in $(seq "$1" "$2"); do cat "$d.t$t" >>"$W/tokens"; done
    "$B/bench/tally-bench" --socket "$d/tally.sock" --tokens "$W/tokens" \
        --requests $(($2 - $1 + 1)) --gap-ms "$3" | tail -1
}

d="$W/d"
ONE=$((2 * SEQ + CONC)) # the tenants after it: the one-client run
setup "$d" $((3 * SEQ + CONC))
"$B/cli/tallyd" --data "$d" --http 127.0.0.1:0 --log-level debug "$@" 2>"$W/log" &
TPID=$!
for _ in $(seq 1 200); do [ -S "$d/tally.sock" ] && break; sleep 0.05; done
sleep 0.3 # tallyd's own start settles

echo "== first decision of $SEQ fresh tenants, one after another, 100 ms apart (an idle machine)"
for t in $(seq 1 "$SEQ"); do first "$t"; sleep 0.1; done | pct "idle first decision"
first_gap $((ONE + 1)) $((ONE + SEQ)) 100 |
    sed -E "s/.*p50_us=([0-9]+).*p99_us=([0-9]+).*p999_us=([0-9]+).*/idle first decision, one client: p50=\1 us p99=\2 us p999=\3 us (n=$SEQ)/"
# The floor under those figures: the same client and gaps, tenants whose supervisors run and
# whose links hold leases (the last 10 above, 10 rounds), so no process but tallyd is on the path.
: >"$W/tokens"
for _ in $(seq 1 10); do
    for t in $(seq $((ONE + SEQ - 9)) $((ONE + SEQ))); do cat "$d.t$t" >>"$W/tokens"; done
done
"$B/bench/tally-bench" --socket "$d/tally.sock" --tokens "$W/tokens" --requests 100 \
    --gap-ms 100 | tail -1 |
    sed -E "s/.*p50_us=([0-9]+).*p99_us=([0-9]+).*p999_us=([0-9]+).*/idle warm decision, one client (the floor): p50=\1 us p99=\2 us p999=\3 us (n=100)/"

echo "== first decision of $SEQ fresh tenants, one after another"
for t in $(seq $((SEQ + 1)) $((2 * SEQ))); do first "$t"; done | pct "sequential first decision"
ready_ts() { # FROM TO: tallyd's supervisor_start to the supervisor's supervisor_ready (us), any build
    { grep -E '"event":"supervisor_(start|ready)"' "$W/log" || true; } |
        sed -nE 's/.*"ts":"[^T]*T([0-9]+):([0-9]+):([0-9.]+)Z".*"event":"supervisor_(start|ready)".*"tenant":"t([0-9]+)".*/\4 \5 \1 \2 \3/p' |
        awk -v a="$1" -v b="$2" '$2 >= a && $2 <= b {
            t = ($3 * 3600 + $4 * 60 + $5) * 1000000
            if ($1 == "start") s[$2] = t; else if ($2 in s) { print t - s[$2]; delete s[$2] } }'
}
ready() { # FROM TO: start to first answer of supervisors t$FROM..t$TO, from tallyd's log (us)
    { grep '"supervisor_first_answer"' "$W/log" || true; } | sed -nE 's/.*"tenant":"t([0-9]+)".*"start_us":([0-9]+).*/\1 \2/p' |
        awk -v a="$1" -v b="$2" '$1 >= a && $1 <= b {print $2}'
}
ready 1 "$SEQ" | pct "idle supervisor start to first answer"
ready $((ONE + 1)) $((ONE + SEQ)) | pct "idle supervisor start to first answer, one client"
ready $((SEQ + 1)) $((2 * SEQ)) | pct "sequential supervisor start to first answer"
ready_ts $((SEQ + 1)) $((2 * SEQ)) | pct "sequential supervisor start to ready (log times, 1 ms steps)"
# CPU time of each live supervisor so far (/proc/PID/schedstat, ns): its start, its first turn.
for p in $(pgrep -P "$TPID"); do
    grep -qa -- "--supervise" /proc/"$p"/cmdline 2>/dev/null || continue
    cut -d' ' -f1 /proc/"$p"/schedstat
done | awk '{s += $1; n++} END {if (n) printf "CPU per supervisor (start and first answer): mean %.0f us (n=%d)\n", s / n / 1000, n}'

echo "== first decision of $CONC fresh tenants at once"
t0=$(date +%s%N)
pids=()
for t in $(seq $((2 * SEQ + 1)) $((2 * SEQ + CONC))); do
    first "$t" >"$W/c$t" &
    pids+=($!)
done
wait "${pids[@]}"
t1=$(date +%s%N)
cat "$W"/c* | pct "concurrent first decision"
ready $((2 * SEQ + 1)) $((2 * SEQ + CONC)) | pct "concurrent supervisor start to first answer"
ready_ts $((2 * SEQ + 1)) $((2 * SEQ + CONC)) | pct "concurrent supervisor start to ready (log times, 1 ms steps)"
echo "all $CONC answered in $(((t1 - t0) / 1000)) us (wall, including $CONC tally-bench starts)"

# A tenant whose first turn tallyd made has no supervisor until a message needs one: a first
# request on a second endpoint (its ledger exists) starts it, and it replays the turn.
echo "== first decision on a second endpoint of the first $SEQ tenants (their supervisors start)"
: >"$W/tokens"
for t in $(seq 1 "$SEQ"); do cat "$d.t$t" >>"$W/tokens"; done
"$B/bench/tally-bench" --socket "$d/tally.sock" --tokens "$W/tokens" --endpoint other \
    --requests "$SEQ" --gap-ms 100 | tail -1 |
    sed -E "s/.*p50_us=([0-9]+).*p99_us=([0-9]+).*p999_us=([0-9]+).*/second endpoint, supervisor started and replaying, one client: p50=\1 us p99=\2 us p999=\3 us (n=$SEQ)/"

echo "== PSS of idle live supervisors (kB)"
sleep 0.5
for p in $(pgrep -P "$TPID"); do
    grep -qa -- "--supervise" /proc/"$p"/cmdline 2>/dev/null || continue
    awk '/^Pss:/ {print $2}' /proc/"$p"/smaps_rollup
done | sort -n | awk '{v[NR]=$1; s+=$1} END { if (NR == 0) exit
    printf "supervisors: n=%d mean=%.0f kB p50=%d kB max=%d kB\n", NR, s/NR, v[int((NR+1)/2)], v[NR]}'
printf 'tallyd: %s kB\n' "$(awk '/^Pss:/ {print $2}' /proc/$TPID/smaps_rollup)"
for p in $(pgrep -P "$TPID"); do
    grep -qa -- "--supervise" /proc/"$p"/cmdline 2>/dev/null && continue
    what="fork server"
    grep -qa -- "--spare-supervisor" /proc/"$p"/cmdline 2>/dev/null && what="spare (forked ahead of a tenant)"
    printf '%s: %s kB\n' "$what" "$(awk '/^Pss:/ {print $2}' /proc/"$p"/smaps_rollup)"
done
grep -c supervisor_start "$W/log" | sed 's/^/supervisor starts logged: /'
# First turns: new tenants whose first leases tallyd granted itself (no supervisor started)
# (the "supervisor start to first answer" rows above then count only the others).
port=$(sed -nE 's/.*"event":"start".*"http":"127\.0\.0\.1:([0-9]+)".*/\1/p' "$W/log" | head -1)
curl -s "http://127.0.0.1:$port/metrics" | awk '/^tally_first_turns_total / {m = $2}
    /^tally_first_turns_not_made_total / {n = $2}
    END {printf "first turns made by tallyd: %d, left to the supervisor: %d\n", m, n}'

echo "== wake-ups of the idle supervisors over 5 s (context switches: each a wake-up)"
sw() { # each live supervisor's pid and context switches so far
    local p
    for p in $(pgrep -P "$TPID"); do
        grep -qa -- "--supervise" /proc/"$p"/cmdline 2>/dev/null || continue
        # A supervisor exiting meanwhile leaves no status to read: skipped, not counted as 0.
        c=$(awk '/ctxt_switches/ {n += $2} END {print n + 0}' /proc/"$p"/status 2>/dev/null) || continue
        if [ "${c:-0}" -gt 0 ]; then echo "$p $c"; fi
    done
}
sw >"$W/sw0"
sleep 5
sw >"$W/sw1"
# Only the supervisors live at both looks (one that exited meanwhile took its count along).
awk 'NR == FNR {a[$1] = $2; next} ($1 in a) {d += $2 - a[$1]; n++}
     END {printf "wake-ups of %d idle supervisors in 5 s: %d\n", n, d}' "$W/sw0" "$W/sw1"
