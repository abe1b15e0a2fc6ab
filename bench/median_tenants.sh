#!/usr/bin/env bash
# bench/median_tenants.sh TSV...: the (lower) median of each figure over
# several bench/tenants.sh runs, per case, target and pass, in the same format
# (so bench/report_tenants.sh and bench/plot_tenants.sh read it). Example:
#   for i in 1 2 3; do bench/tenants.sh; cp bench/out/multitenant.tsv /tmp/mt$i.tsv; done
#   bench/median_tenants.sh /tmp/mt[123].tsv >/tmp/mt.tsv
#   bench/report_tenants.sh /tmp/mt.tsv; bench/plot_tenants.sh /tmp/mt.tsv bench/img/multitenant.png
set -euo pipefail
awk -F'\t' -v OFS='\t' '
    function med(s,   a, n, t, i, j) {
        n = split(s, a, " ")
        for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
        return a[int((n + 1) / 2)]
    }
    FNR == 1 { if (NR == 1) print; next }
    {
        k = $1 OFS $2 OFS $3 OFS $4 OFS $5 OFS $6 OFS $7
        if (!(k in seen)) { seen[k] = 1; keys[++nk] = k }
        for (f = 8; f <= NF; f++) if ($f != "" && $f != "NaN") v[k, f] = v[k, f] " " $f
        if (NF > nf) nf = NF
    }
    END {
        for (i = 1; i <= nk; i++) {
            line = keys[i]
            for (f = 8; f <= nf; f++) line = line OFS ((keys[i], f) in v ? med(v[keys[i], f]) : "")
            print line
        }
    }' "$@"
