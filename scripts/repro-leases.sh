#!/usr/bin/env bash
# Reproduces two lease-path problems seen with the real processes (release build):
#  1. burst: 200 pipelined requests on one link against a limit of 10 admit only
#     a few in time; grants come one token per round trip and the next ACQUIRE
#     often leaves only on a 1 s tick;
#  2. steady: 20,000 sequential requests over 100 links make tallyd spin at
#     100% CPU in front_child_pump -> sup_child_next_message -> build_return,
#     and a request is never answered.
set -euo pipefail
B=${B:-build/release}
D=$(mktemp -d)
T="$B/cli/tally --data $D/d"
$T init 2>/dev/null
$T plan set pro --limit 100000000/1d
$T endpoint set search --limit 100000000/1d
$T endpoint set a --limit 10/365d
$T tenant add acme --plan pro
for i in $(seq 1 100); do $T link create acme; done > "$D/tokens" 2>/dev/null
head -1 "$D/tokens" > "$D/one"
"$B/cli/tallyd" --data "$D/d" --http 127.0.0.1:0 --wait-ms 3000 2> "$D/log" &
pid=$!
sleep 0.5
echo "burst (expect admitted=10):"
"$B/bench/tally-bench" --socket "$D/d/tally.sock" --tokens "$D/one" --endpoint a --connections 20 --pipeline 10 --requests 200 || true
echo "steady (expect no hang):"
timeout 60 "$B/bench/tally-bench" --socket "$D/d/tally.sock" --tokens "$D/tokens" --requests 20000 || true
kill $pid; wait $pid || true
echo "data in $D"
