#!/usr/bin/env bash
# bench/report_tenants.sh TSV: the markdown table of bench/tenants.sh's TSV
# (one row per case and tallyd pass; Redis on the same streams beside the
# measured passes: each side's median pass, and the median of the pairs' ratios).
set -euo pipefail
echo "### Many tenants (Zipf over tenants, 4 connections x 4 in flight; tallyd default settings)"
echo
echo "| tenants on disk | drawn | Zipf s | tally pass | decisions/s | p50 ms | p99 ms | p99.9 ms | neither (timeouts) | supervisors live | PSS MB | fds | data MB | Redis decisions/s | Redis p99 ms | tally / Redis (median of pairs) |"
echo "| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
awk -F'\t' '
    function ms(v) { return v == "NaN" ? "-" : sprintf("%.2f", v / 1000) }
    NR > 1 {
        if (!($1 in seen)) { seen[$1] = 1; keys[++n] = $1 }
        row[$1, $6 "-" $7] = $0
    }
    END {
        for (i = 1; i <= n; i++) {
            k = keys[i]
            split(row[k, "redis-warm"], r, "\t")
            for (p = 1; p <= 2; p++) {
                pass = p == 1 ? "cold" : "warm"
                if (!((k, "tally-" pass) in row))
                    continue
                split(row[k, "tally-" pass], f, "\t")
                rd = rp = ratio = ""
                if (pass == "warm" && r[8] != "") {
                    rd = r[8]; rp = ms(r[10])
                    if ((k, "ratio-median") in row) {
                        split(row[k, "ratio-median"], q, "\t"); ratio = q[8]
                    } else if (r[8] > 0 && f[8] != "NaN") ratio = sprintf("%.4f", f[8] / r[8])
                }
                printf "| %d | %d | %s | %s | %s | %s | %s | %s | %d (%d) | %s | %.0f | %s | %.0f | %s | %s | %s |\n",
                    f[2], f[3], f[5], pass == "cold" ? "cold" : "measured", f[8], ms(f[9]), ms(f[10]), ms(f[11]),
                    f[14], f[15], f[16], f[17] / 1024, f[18], f[19] / 1024, rd, rp, ratio
            }
        }
    }' "$1"
echo
