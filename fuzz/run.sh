#!/bin/sh
# Runs each libFuzzer target of build/fuzz for SECONDS (default 60) over its
# checked-in seed corpus fuzz/corpus/<name>/ (replayed first) plus a scratch
# corpus in build/fuzz/corpus/<name>/ where new inputs go, with the target's
# dictionary when there is one. A crash, leak, timeout or broken property
# fails the run: the input is saved as build/fuzz/crashes/<name>-crash-*, the
# log's tail is printed, and the exit status is 1 after every target ran.
#
#   fuzz/run.sh [SECONDS [NAME...]]
#
# Reproduce a crash: build/fuzz/fuzz/fuzz_<name> build/fuzz/crashes/<name>-crash-...
set -u
cd "$(dirname "$0")/.."
secs=${1:-60}
[ $# -gt 0 ] && shift
names=${*:-frame client lease model config http caller chan member}
bin=build/fuzz/fuzz
status=0

mkdir -p build/fuzz/crashes build/fuzz/logs
for name in $names; do
    exe=$bin/fuzz_$name
    if [ ! -x "$exe" ]; then
        echo "fuzz $name: $exe is missing (cmake --preset fuzz && cmake --build build/fuzz --target fuzzers)"
        status=1
        continue
    fi
    mkdir -p "build/fuzz/corpus/$name"
    dict=""
    [ -f "fuzz/$name.dict" ] && dict="-dict=fuzz/$name.dict"
    log=build/fuzz/logs/$name.log
    # shellcheck disable=SC2086
    if "$exe" $dict -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -max_len=8192 \
        -artifact_prefix="build/fuzz/crashes/$name-" \
        "build/fuzz/corpus/$name" "fuzz/corpus/$name" >"$log" 2>&1; then
        runs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log")
        echo "fuzz $name: ok, ${runs:-?} runs in ${secs} s"
    else
        echo "fuzz $name: FAILED (log: $log)"
        tail -n 40 "$log"
        status=1
    fi
done
exit $status
