#!/usr/bin/env bash
# bench/report.sh OUT: the tables of a bench/run (markdown, also in OUT/table.md)
# from OUT/median.tsv, http.tsv, growth.tsv, tenants.tsv and multitenant.tsv.
set -euo pipefail
OUT=$1
{
echo "### Binary protocol (medians; mix admit/refuse: 10,000 links over 50 tenants, hot100: 100 links of one tenant; ratios: this row / anchor)"
echo
echo "| target | mix | setting | decisions/s | p50 us | p99 us | p99.9 us | server CPU us/decision | server RSS MB | x echo | x redis fw | x redis gcra | p99 / echo p99 |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
awk -F'\t' '
    { k = $1 "|" $2 "|" $3; dps[k] = $4; p99[k] = $6; row[++n] = $0 }
    END {
        for (i = 1; i <= n; i++) {
            split(row[i], f, "\t")
            t = f[1]; m = f[2]; s = f[3]
            r1 = r2 = r3 = r4 = ""
            if (t ~ /^tally/) {
                e = "echo|any|" s
                if (dps[e] > 0) r1 = sprintf("%.2f", f[4] / dps[e])
                if (dps["redis-fw|" m "|" s] > 0) r2 = sprintf("%.2f", f[4] / dps["redis-fw|" m "|" s])
                if (dps["redis-gcra|" m "|" s] > 0) r3 = sprintf("%.2f", f[4] / dps["redis-gcra|" m "|" s])
                if (p99[e] > 0) r4 = sprintf("%.1f", f[6] / p99[e])
            }
            printf "| %s | %s | %s | %d | %.1f | %.1f | %.1f | %.2f | %.1f | %s | %s | %s | %s |\n",
                t, m, s, f[4], f[5], f[6], f[7], f[11] / 1000, f[12] / 1024, r1, r2, r3, r4
        }
    }' <(sort -t$'\t' -k3,3 -k2,2 -k1,1 "$OUT/median.tsv")
echo
if [ -s "$OUT/http.tsv" ]; then
    echo "### HTTP, wrk -t1 -c50 (median of runs; wrk's latency: closed loop, coordinated omission)"
    echo
    echo "| server | req/s | p50 us | p99 us | non-2xx | server CPU us/request | RSS MB |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    sort -t$'\t' -k1,1 -k2,2n "$OUT/http.tsv" | awk -F'\t' '
        { k = $1; c[k]++; v[k, c[k]] = $0; if (!(k in seen)) { seen[k] = 1; keys[++n] = k } }
        END {
            for (i = 1; i <= n; i++) {
                k = keys[i]; split(v[k, int((c[k] + 1) / 2)], f, "\t"); rps[k] = f[2]
                printf "| %s | %d | %.1f | %.1f | %d | %.2f | %.1f |\n", k, f[2], f[3], f[4], f[5], f[6] / 1000, f[7] / 1024
            }
            if (rps["nginx-204"] > 0)
                for (i = 1; i <= n; i++)
                    if (keys[i] ~ /^tally-http/)
                        printf "\n%s: tally /v1/check reaches %.0f%% of nginx `return 204`.\n", keys[i], 100 * rps[keys[i]] / rps["nginx-204"]
        }'
    echo
fi
if [ -s "$OUT/growth.tsv" ]; then
    echo "### Growth: live links of one tenant (tallyd alone, before and after a 1-connection run)"
    echo
    echo "| live links | created in s | tallyd up in ms | idle RSS MB | RSS after load MB | bytes per link (idle, vs 1 link) | p50 us | p99 us |"
    echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    awk -F'\t' 'NR == 1 { base = $4 }
        { per = $1 > 1 ? sprintf("%.0f", ($4 - base) * 1024 / ($1 - 1)) : "-"
          printf "| %d | %s | %d | %.1f | %.1f | %s | %.1f | %.1f |\n", $1, $2, $3, $4 / 1024, $5 / 1024, per, $6, $7 }' \
        "$OUT/growth.tsv"
    echo
fi
if [ -s "$OUT/tenants.tsv" ]; then
    echo "### One hot tenant against many (50 connections x 1; tallyd and its supervisors)"
    echo
    echo "| run | decisions/s | p50 us | p99 us | supervisors live | RSS MB (sum) | PSS MB (sum) |"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
    awk -F'\t' '{ printf "| %s | %d | %.1f | %.1f | %s | %.1f | %.1f |\n", $1, $2, $3, $4, $5, $6 / 1024, $7 / 1024 }' \
        "$OUT/tenants.tsv"
    echo
fi
if [ -s "$OUT/multitenant.tsv" ]; then
    "$(dirname "$0")/report_tenants.sh" "$OUT/multitenant.tsv"
fi
} | tee "$OUT/table.md"
