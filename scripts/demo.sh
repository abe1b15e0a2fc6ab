#!/usr/bin/env bash
# make run: a demo tenant, plan, endpoint and link in $DATA, then tallyd in the
# foreground. Idempotent: an existing data dir keeps its configuration and gets
# a fresh demo link.
set -euo pipefail
: "${DATA:?}" "${HTTP:?}" "${BIN:?}"
tally() { "$BIN/tally" --data "$DATA" "$@"; }

if [ ! -f "$DATA/secret.key" ]; then
    tally init
fi
tally plan set demo --limit 60/1m --limit 1000/1h --link-limit 30/1m --concurrency 2
tally endpoint set search --limit 10/1m --tenant-limit 100/1m
tally endpoint set export --limit 5/1h --expensive
tally tenant show demo >/dev/null 2>&1 || tally tenant add demo --plan demo
token=$(tally link create demo)

cat <<MSG

  demo tenant 'demo' (plan demo: 60/1m, 1000/1h; search: 10/1m per link)
  token (shown once): $token

  try it:
    curl -i http://$HTTP/healthz
    $BIN/tally --data $DATA check $token search

MSG
exec "$BIN/tallyd" --data "$DATA" --http "$HTTP"
