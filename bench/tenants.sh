#!/usr/bin/env bash
# bench/tenants.sh [--quick]: many tenants, a few hot ones. tallyd (default
# settings) against redis-server + the fixed-window Lua script on the same
# token stream.
#
# Data: T tenants x L links on plan `pro` (1,000,000/1h), endpoint `search`
# (100,000/1h per link), made by `tally` and `tally-bench-links`. Requests:
# tally-bench --zipf S: a tenant drawn from Zipf(S) over K tenants (rank 1 the
# most popular, ranks a shuffle of the tenants that is the same for every pass:
# a pass's seed changes the stream, not which tenants are drawn or how popular),
# then one of its links uniformly; C connections x D in flight, closed loop.
# Per case:
#   tallyd --data DIR --http 127.0.0.1:0 (nothing else: strict durability),
#   pinned to CPU 0, the load on CPU 1:
#     cold pass (COLD_SECS, measured), the same load unmeasured for SETTLE
#     seconds and then on until the warm-up has turned: two SETTLE_STEP-second
#     steps in a row agree within 20 % and under 1 % of the last one's requests
#     waited for a lease (at most SETTLE_MAX seconds; each step's rate
#     printed);
#   redis-server (no persistence) on CPU 0 beside it, WARM_REDIS seconds
#     unmeasured; then PAIRS pairs of measured passes (SECS each, after PREPASS
#     seconds unmeasured), tally then Redis on the same seed: the same token
#     stream. Kept: each side's median pass, and the median of the pairs'
#     ratios (a neighbour's burst on a shared machine lands in one pass).
# Each pass prints decisions/s (admitted + refused), p50/p99/p99.9, answers
# neither admitted nor refused (unavailable, errors, timeouts), and for tallyd
# the supervisors live (/metrics), PSS of tallyd and its children, tallyd's
# open fds and the data dir's size. Every pass is bounded (--seconds and
# --timeout-ms, then `timeout`); servers are stopped by pid on exit (trap).
#
# Writes OUT/multitenant.tsv, draws IMG/multitenant.png.
# Environment: BENCH_BUILD, BENCH_OUT, BENCH_IMG, SRV_CPU (0), CLI_CPU (1),
# CONNS (4), DEPTH (4), SEED (1), COLD_SECS, SETTLE, SETTLE_STEP (15), SETTLE_MAX, SECS, WARM_REDIS,
# PAIRS, PREPASS,
# TIMEOUT_MS (10000), CASES ("T:K:L:S ..." tenants on disk, tenants drawn,
# links per tenant, Zipf exponent).
#   full:  CASES="1000:1000:2:0.8 1000:1000:2:1.1 10000:10000:2:0.8
#          10000:10000:2:1.1 100000:10000:2:1.1", cold 15 s, settle 60 to 300 s,
#          3 pairs of 15 s passes (3 s before each)
#   quick: CASES="200:200:2:1.1", cold 2 s, settle 2 s, 1 pair of 3 s passes (1 s before)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
QUICK=0
[ "${1:-}" = --quick ] && QUICK=1
B=${BENCH_BUILD:-$ROOT/build/bench}
OUT=${BENCH_OUT:-$ROOT/bench/out}
IMG=${BENCH_IMG:-$ROOT/bench/img}
[ $QUICK = 1 ] && IMG=${BENCH_IMG:-$OUT/img} # a smoke run never redraws the committed picture
SRV_CPU=${SRV_CPU:-0}
CLI_CPU=${CLI_CPU:-1}
CONNS=${CONNS:-4}
DEPTH=${DEPTH:-4}
SEED=${SEED:-1}
TIMEOUT_MS=${TIMEOUT_MS:-10000}
SETTLE_STEP=${SETTLE_STEP:-15}
MAXREQ=50000000
if [ $QUICK = 1 ]; then
    CASES=${CASES:-200:200:2:1.1}
    COLD_SECS=${COLD_SECS:-2} SETTLE=${SETTLE:-2} SECS=${SECS:-3} WARM_REDIS=${WARM_REDIS:-1}
    PAIRS=${PAIRS:-1} PREPASS=${PREPASS:-1}
    SETTLE_MAX=${SETTLE_MAX:-$SETTLE}
else
    CASES=${CASES:-1000:1000:2:0.8 1000:1000:2:1.1 10000:10000:2:0.8 10000:10000:2:1.1 100000:10000:2:1.1}
    COLD_SECS=${COLD_SECS:-15} SETTLE=${SETTLE:-60} SECS=${SECS:-15} WARM_REDIS=${WARM_REDIS:-5}
    PAIRS=${PAIRS:-3} PREPASS=${PREPASS:-3}
    SETTLE_MAX=${SETTLE_MAX:-300}
fi
[ "$SETTLE_MAX" -lt "$SETTLE" ] && SETTLE_MAX=$SETTLE
TALLY="$B/cli/tally"
W=$(mktemp -d /tmp/tally-tenants.XXXXXX)
TPID="" RPID=""

# stop PID: SIGTERM and wait up to 30 s (tallyd stops its supervisors), then
# SIGKILL it and whatever children it left.
stop() {
    local p=$1 kids
    [ -n "$p" ] || return 0
    kids=$(pgrep -P "$p" || true)
    kill "$p" 2>/dev/null || true
    for _ in $(seq 1 300); do
        kill -0 "$p" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$p" 2>/dev/null; then
        echo "bench/tenants.sh: pid $p still up after 30 s, SIGKILL" >&2
        # shellcheck disable=SC2086 # a list of pids
        kill -9 "$p" $kids 2>/dev/null || true
    fi
    wait "$p" 2>/dev/null || true
}
cleanup() {
    stop "$TPID"
    stop "$RPID"
    rm -rf "$W"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$OUT" "$IMG"
TSV="$OUT/multitenant.tsv"
printf 'case\ttenants\tdrawn\tlinks\tzipf\ttarget\tpass\tdecisions_per_s\tp50_us\tp99_us\tp999_us\tadmitted\trefused\tother\ttimeouts\tsupervisors_live\tpss_kb\tfds\tdata_kb\n' >"$TSV"
T0=$(date +%s)

echo "== build ($B, RelWithDebInfo)"
cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTALLY_WERROR=ON >/dev/null
cmake --build "$B" -j2 --target tallyd tally_cli tally-bench tally-bench-links >/dev/null

field() { # LINE NAME: the value of NAME=value in LINE
    sed -nE "s/.*(^| )$2=([^ ]+).*/\\2/p" <<<"$1"
}

waits_decisions() { # "WAITS DECISIONS" so far, from tallyd's /metrics
    curl -s --max-time 5 "http://$HTTP/metrics" | awk '$1 == "tally_waits_total" { w = $2 }
        $1 ~ /^tally_decisions_total/ { d += $2 } END { printf "%d %d\n", w, d }' || echo "0 0"
}

steady() { # RATE1 RATE2: both positive and within 20 % of the larger
    awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN { m = a > b ? a : b
        exit !(a > 0 && b > 0 && (a > b ? a - b : b - a) <= 0.2 * m) }'
}

pss_kb() { # PID: Pss of PID and its children, kB
    local p s=0 v
    for p in $1 $(pgrep -P "$1" || true); do
        v=$(awk '/^Pss:/ {print $2}' /proc/"$p"/smaps_rollup 2>/dev/null || true)
        s=$((s + ${v:-0}))
    done
    echo "$s"
}

wait_socket() { # PATH PID

    for _ in $(seq 1 600); do
        [ -S "$1" ] && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.05
    done
    echo "bench/tenants.sh: $1 never came up" >&2
    return 1
}

# load SECONDS SEED TARGET-ARGS...: one bounded closed-loop pass on the client
# CPU; prints tally-bench's last line (empty if it failed).
load() {
    local secs=$1 seed=$2
    shift 2
    timeout $((${secs%.*} + TIMEOUT_MS / 1000 + 30)) taskset -c "$CLI_CPU" \
        "$B/bench/tally-bench" "$@" --zipf "$ZIPF" --links-per-tenant "$LINKS" \
        --draw-tenants "$DRAWN" --seed "$seed" --connections "$CONNS" --pipeline "$DEPTH" \
        --requests "$MAXREQ" --seconds "$secs" --timeout-ms "$TIMEOUT_MS" 2>>"$W/bench.err" |
        tail -1 || true
}

# row TARGET PASS LINE [SUPERVISORS PSS FDS DATA_KB]: a TSV row and a line.
row() {
    local target=$1 pass=$2 line=$3 sup=${4:-} pss=${5:-} fds=${6:-} dkb=${7:-}
    local f v=()
    for f in decisions_per_s p50_us p99_us p999_us admitted refused other timeouts; do
        v+=("$(field "$line" "$f")")
    done
    [ -n "${v[0]}" ] || v=(NaN NaN NaN NaN 0 0 0 0)
    {
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s' "$CASE" "$TENANTS" "$DRAWN" "$LINKS" "$ZIPF" \
            "$target" "$pass"
        printf '\t%s' "${v[@]}" "$sup" "$pss" "$fds" "$dkb"
        printf '\n'
    } >>"$TSV"
    printf '  %-5s %-5s %9s dec/s  p50 %9s us  p99 %10s us  p99.9 %10s us  other %s (timeouts %s)' \
        "$target" "$pass" "${v[0]}" "${v[1]}" "${v[2]}" "${v[3]}" "${v[6]}" "${v[7]}"
    [ -n "$sup" ] && printf '  supervisors %s  PSS %s MB  fds %s  data %s MB' "$sup" \
        "$((pss / 1024))" "$fds" "$((dkb / 1024))"
    printf '\n'
}

# tally_row PASS LINE: row for tallyd with its supervisors, memory, fds, disk.
tally_row() {
    local sup
    sup=$(curl -s --max-time 5 "http://$HTTP/metrics" |
        awk '$1 == "tally_supervisors_live" {print $2}' || true)
    row tally "$1" "$2" "${sup:-NaN}" "$(pss_kb "$TPID")" \
        "$(find /proc/"$TPID"/fd -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" \
        "$(du -sk "$D" | cut -f1)"
}

mkdir -p "$W/redis"
for c in $CASES; do
    IFS=: read -r TENANTS DRAWN LINKS ZIPF <<<"$c"
    CASE="T${TENANTS}-K${DRAWN}-s${ZIPF}"
    # Each case gets its own data dir, all removed at the end: on ext4 without a journal,
    # for a minute or more after a file is deleted every new file's inode is found by
    # skipping the freed ones one read at a time, so deleting one case's thousands of files
    # would slow the next case's tenant starts by a third.
    D="$W/data-$CASE"
    HOUR0=$(date -u +%Y%m%d%H)
    echo "== $CASE: $TENANTS tenants x $LINKS links on disk, Zipf($ZIPF) over $DRAWN of them," \
        "$CONNS x $DEPTH in flight; tallyd on CPU $SRV_CPU, load on CPU $CLI_CPU;" \
        "load average $(cut -d' ' -f1-3 /proc/loadavg)"
    rm -f "$W/tok"
    "$TALLY" --data "$D" init >/dev/null 2>&1
    "$TALLY" --data "$D" plan set pro --limit 1000000/1h >/dev/null
    "$TALLY" --data "$D" endpoint set search --limit 100000/1h >/dev/null
    "$B/bench/tally-bench-links" --data "$D" --plan pro --tenants "$TENANTS" --links "$LINKS" \
        --out "$W/tok"

    : >"$W/tallyd.log"
    taskset -c "$SRV_CPU" "$B/cli/tallyd" --data "$D" --http 127.0.0.1:0 2>"$W/tallyd.log" &
    TPID=$!
    wait_socket "$D/tally.sock" "$TPID"
    HTTP=$(sed -nE 's/.*"event":"start".*"http":"([^"]+)".*/\1/p' "$W/tallyd.log" | head -1)
    args=(--socket "$D/tally.sock" --tokens "$W/tok")
    tally_row cold "$(load "$COLD_SECS" "$SEED" "${args[@]}")"
    # The settle, in steps of SETTLE_STEP seconds (a seed each) whose rates are printed: how
    # long this many tenants take to warm up shows there. At least SETTLE seconds, then on
    # until the warm-up has turned (calm and steady), at most SETTLE_MAX.
    t=0 i=0 prev=0 rate=0 calm=0 wd0=$(waits_decisions)
    while [ "$t" -lt "$SETTLE" ] ||
        { [ "$t" -lt "$SETTLE_MAX" ] && ! { [ "$calm" = 1 ] && steady "$prev" "$rate"; }; }; do
        step=$((SETTLE - t < SETTLE_STEP && SETTLE - t > 0 ? SETTLE - t : SETTLE_STEP))
        line=$(load "$step" $((SEED + 10 + i)) "${args[@]}")
        t=$((t + step)) i=$((i + 1))
        prev=$rate rate=$(field "$line" decisions_per_s)
        wd1=$(waits_decisions)
        # Calm: under 1 % of the step's requests waited for a lease (none for a supervisor).
        calm=$(echo "$wd0 $wd1" | awk '{ dd = $4 - $2; print (dd > 0 && ($3 - $1) * 100 < dd) }')
        wd0=$wd1
        printf '  tally settle %4s s %9s dec/s  %s\n' "$t" "$rate" \
            "$([ "$calm" = 1 ] && echo "calm" || echo "requests waiting for leases")"
    done
    printf '  tally settled after %s s of load past the cold pass\n' "$t"
    # Redis beside the warm tallyd (idle while the other is measured), then PAIRS measured
    # pairs, tally then Redis, each pair on its own seed (one token stream for both), each
    # pass after PREPASS seconds of the same load unmeasured (a supervisor gone idle while
    # the other was measured starts again there, as it would under steady traffic). On a
    # shared 2-core machine a neighbour's burst lands in one pass, not in every pass of one
    # side: the rows kept are each side's median pass, and the ratio quoted is the median of
    # the pairs' ratios.
    rm -f "$W/redis/redis.sock"
    taskset -c "$SRV_CPU" redis-server --port 0 --unixsocket "$W/redis/redis.sock" --save '' \
        --appendonly no --dir "$W/redis" --loglevel warning --logfile "$W/redis/log" &
    RPID=$!
    wait_socket "$W/redis/redis.sock" "$RPID"
    rargs=(--redis "$W/redis/redis.sock" --script "$ROOT/bench/redis/fixed_window.lua"
        --limit 100000 --period-ms 3600000 --tokens "$W/tok")
    load "$WARM_REDIS" $((SEED + 1)) "${rargs[@]}" >/dev/null
    : >"$W/pairs"
    for i in $(seq 1 "$PAIRS"); do
        ps=$((SEED + 1 + i))
        load "$PREPASS" $((ps + 100)) "${args[@]}" >/dev/null
        tline=$(load "$SECS" "$ps" "${args[@]}")
        tally_row "m$i" "$tline"
        load "$PREPASS" $((ps + 100)) "${rargs[@]}" >/dev/null
        rline=$(load "$SECS" "$ps" "${rargs[@]}")
        row redis "m$i" "$rline"
        printf '%s\t%s\n' "$(field "$tline" decisions_per_s)" "$(field "$rline" decisions_per_s)" >>"$W/pairs"
    done
    stop "$TPID"
    TPID=""
    cp -f "$W/tallyd.log" "$OUT/tallyd-$CASE.log" 2>/dev/null || true
    stop "$RPID"
    RPID=""
    # Each side's median pass (by decisions/s) again as its "warm" row.
    for target in tally redis; do
        awk -F'\t' -v c="$CASE" -v t="$target" '$1 == c && $6 == t && $7 ~ /^m[0-9]+$/' "$TSV" |
            sort -t$'\t' -k8,8g | awk -v m=$(((PAIRS + 1) / 2)) 'NR == m' |
            awk -F'\t' 'BEGIN { OFS = "\t" } { $7 = "warm"; print }' >>"$TSV"
    done
    awk -F'\t' '$1 > 0 && $2 > 0 { r[++n] = $1 / $2; printf "  pair %d: tally %s, redis %s dec/s, ratio %.4f\n", n, $1, $2, r[n] }
        END { if (n == 0) exit
              for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { x = r[i]; r[i] = r[j]; r[j] = x }
              printf "  tally / redis, median of %d pairs: %.4f (%.4f to %.4f)\n", n, n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2, r[1], r[n] }' \
        "$W/pairs" | tee "$W/ratio"
    # The median ratio as a row of its own (target "ratio", in the decisions/s column).
    med=$(sed -nE 's/.*median of [0-9]+ pairs: ([0-9.]+).*/\1/p' "$W/ratio")
    if [ -n "$med" ]; then
        printf '%s\t%s\t%s\t%s\t%s\tratio\tmedian\t%s\n' "$CASE" "$TENANTS" "$DRAWN" "$LINKS" \
            "$ZIPF" "$med" >>"$TSV"
    fi
    if [ "$(date -u +%Y%m%d%H)" != "$HOUR0" ]; then
        echo "  note: this case crossed the end of an hour (every tenant's hourly windows end there)"
    fi
    rm -f "$W/tok"
done
if [ -s "$W/bench.err" ]; then
    echo "tally-bench said (last lines):"
    tail -n 8 "$W/bench.err"
fi

"$ROOT/bench/report_tenants.sh" "$TSV"
"$ROOT/bench/plot_tenants.sh" "$TSV" "$IMG/multitenant.png"
echo "== many tenants done in $(($(date +%s) - T0)) s (load average $(cut -d' ' -f1-3 /proc/loadavg));" \
    "$TSV, $IMG/multitenant.png"
