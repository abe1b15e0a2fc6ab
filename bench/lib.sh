# Helpers for bench/run (sourced): servers started pinned and stopped by pid,
# CPU time and memory of a server's process tree, one measured load run.
# Expects B (build dir), W (scratch dir), OUT (results dir), SRV_CPU, CLI_CPU,
# SECS and MAXREQ from bench/run.

PIDS=()

# start_server VAR CMD...: runs CMD pinned to the server CPU, sets VAR to its pid.
start_server() {
    local var=$1
    shift
    taskset -c "$SRV_CPU" "$@" &
    PIDS+=($!)
    printf -v "$var" '%s' $!
}

# stop_server PID: SIGTERM, then wait (its supervisors exit with it).
stop_server() {
    kill "$1" 2>/dev/null || true
    wait "$1" 2>/dev/null || true
}

stop_all() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
}

wait_for() { # PATH-OR-PORT: a socket file, or a TCP port on 127.0.0.1
    local i
    for i in $(seq 1 400); do
        if [[ $1 == /* ]]; then [ -S "$1" ] && return 0; else
            (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        fi
        sleep 0.05
    done
    echo "bench/run: $1 never came up" >&2
    return 1
}

tree() { # PID: the pid and its children (tallyd's supervisors, nginx's worker)
    echo "$1"
    pgrep -P "$1" || true
}

# cpu_ns PID: CPU time (ns) of the process tree, from /proc/*/task/*/schedstat.
cpu_ns() {
    local p t a s=0
    for p in $(tree "$1"); do
        for t in /proc/"$p"/task/*/schedstat; do
            read -r a _ <"$t" 2>/dev/null && s=$((s + a))
        done
    done
    echo "$s"
}

# rss_kb PID: resident memory of the process tree (kB, VmRSS summed).
rss_kb() {
    local p s=0 v
    for p in $(tree "$1"); do
        v=$(awk '/^VmRSS:/ {print $2}' /proc/"$p"/status 2>/dev/null || echo 0)
        s=$((s + ${v:-0}))
    done
    echo "$s"
}

# pss_kb PID: proportional memory of the tree (shared pages split), kB.
pss_kb() {
    local p s=0 v
    for p in $(tree "$1"); do
        v=$(awk '/^Pss:/ {print $2}' /proc/"$p"/smaps_rollup 2>/dev/null || echo 0)
        s=$((s + ${v:-0}))
    done
    echo "$s"
}

field() { # LINE NAME: the value of NAME=value in LINE
    sed -nE "s/.*(^| )$2=([^ ]+).*/\\2/p" <<<"$1"
}

# setting_args SETTING: connections, pipeline and client CPU of a setting.
# 1x1 runs on the server's CPU (BENCHMARKING.md: same-CPU latency).
setting_args() {
    case $1 in
    1x1) echo "1 1 $SRV_CPU" ;;
    50x1) echo "50 1 $CLI_CPU" ;;
    50x16) echo "50 16 $CLI_CPU" ;;
    esac
}

# measure TARGET MIX SETTING REP SERVER_PID TALLY-BENCH-ARGS...: one timed run;
# appends a row to $OUT/runs.tsv: target mix setting rep decisions_per_s p50 p99
# p999 admitted refused other cpu_ns_per_decision rss_kb.
measure() {
    local target=$1 mix=$2 setting=$3 rep=$4 spid=$5
    shift 5
    local conns pipe cpu c0 c1 line err other n cpu_per
    read -r conns pipe cpu <<<"$(setting_args "$setting")"
    # Settle at this very setting first, so the figure is its steady state and
    # not the way out of the previous setting (leases grown by 50 x 16 still
    # live at 1 x 1, or cold ones still growing at 50 x 16).
    taskset -c "$cpu" "$B/bench/tally-bench" "$@" --connections "$conns" --pipeline "$pipe" \
        --requests "$MAXREQ" --seconds "$SETTLE" >/dev/null 2>&1 || true
    c0=$(cpu_ns "$spid")
    line=$(taskset -c "$cpu" "$B/bench/tally-bench" "$@" --connections "$conns" --pipeline "$pipe" \
        --requests "$MAXREQ" --seconds "$SECS" 2>"$W/err" | tail -1) || true
    c1=$(cpu_ns "$spid")
    err=$(cat "$W/err")
    other=$(sed -nE 's/.* ([0-9]+) answers neither.*/\1/p' <<<"$err")
    other=${other:-0}
    if [ -z "$line" ]; then
        echo "bench/run: $target $mix $setting failed: $err" >&2
        return 0
    fi
    n=$(($(field "$line" admitted) + $(field "$line" refused) + other))
    cpu_per=$(awk -v a="$c0" -v b="$c1" -v n="$n" 'BEGIN {printf "%.2f", n ? (b - a) / n : 0}')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$target" "$mix" "$setting" \
        "$rep" "$(field "$line" decisions_per_s)" "$(field "$line" p50_us)" \
        "$(field "$line" p99_us)" "$(field "$line" p999_us)" "$(field "$line" admitted)" \
        "$(field "$line" refused)" "$other" "$cpu_per" "$(rss_kb "$spid")" >>"$OUT/runs.tsv"
    printf '  %-14s %-7s %-6s rep %s: %s%s\n' "$target" "$mix" "$setting" "$rep" "$line" \
        "$([ "$other" -gt 0 ] && echo " other=$other")"
}

# warm PID TALLY-BENCH-ARGS...: an unmeasured run (supervisors, leases, caches).
warm() {
    shift
    taskset -c "$CLI_CPU" "$B/bench/tally-bench" "$@" --connections 50 --pipeline 16 \
        --requests "$MAXREQ" --seconds "$WARM" >/dev/null 2>&1 || true
}

# us VALUE-WITH-UNIT: wrk's "85.00us" / "1.20ms" / "2.00s" in microseconds.
us() {
    awk -v v="$1" 'BEGIN {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        if (u == "ms") n *= 1000; else if (u == "s") n *= 1000000
        printf "%.1f", n }'
}

# wrk_run NAME PID URL [-s SCRIPT URL -- ARGS]: wrk -t1 -c50 on the client CPU,
# appends name req_per_s p50 p99 non2xx cpu_ns_per_request rss_kb to http.tsv.
wrk_run() {
    local name=$1 spid=$2
    shift 2
    local c0 c1 o rps n non p50 p99
    c0=$(cpu_ns "$spid")
    o=$(taskset -c "$CLI_CPU" wrk -t1 -c50 -d"${HTTP_SECS}s" --latency "$@")
    c1=$(cpu_ns "$spid")
    rps=$(awk '/^Requests\/sec:/ {print $2}' <<<"$o")
    n=$(awk '/requests in/ {print $1}' <<<"$o")
    non=$(awk '/Non-2xx/ {print $NF}' <<<"$o")
    p50=$(us "$(awk '$1 == "50%" {print $2}' <<<"$o")")
    p99=$(us "$(awk '$1 == "99%" {print $2}' <<<"$o")")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$rps" "$p50" "$p99" "${non:-0}" \
        "$(awk -v a="$c0" -v b="$c1" -v n="$n" 'BEGIN {printf "%.2f", n ? (b - a) / n : 0}')" \
        "$(rss_kb "$spid")" >>"$OUT/http.tsv"
    printf '  %-16s %s req/s p50 %s us p99 %s us non-2xx %s\n' "$name" "$rps" "$p50" "$p99" \
        "${non:-0}"
}

# median over reps of (target, mix, setting): the table rows.
aggregate() {
    sort -t$'\t' -k1,1 -k2,2 -k3,3 "$OUT/runs.tsv" | awk -F'\t' -v OFS='\t' '
        function med(s,   a, n, t, i, j) {
            n = split(s, a, " ")
            for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
            return a[int((n + 1) / 2)]
        }
        {
            k = $1 OFS $2 OFS $3
            if (!(k in seen)) { seen[k] = 1; keys[++nk] = k }
            for (f = 5; f <= 13; f++) v[k, f] = v[k, f] " " $f
        }
        END {
            for (i = 1; i <= nk; i++) {
                k = keys[i]; line = k
                for (f = 5; f <= 13; f++) line = line OFS med(v[k, f])
                print line
            }
        }' >"$OUT/median.tsv"
}
