#!/usr/bin/env bash
# bench/plot_tenants.sh TSV PNG: draws PNG from bench/tenants.sh's TSV: per case
# (tenants on disk, drawn, Zipf exponent), decisions/s and p99 of tallyd's cold
# and warm passes and of redis-server + fixed-window Lua on the same stream.
set -euo pipefail
TSV=$1
PNG=$2
DAT=${PNG%.png}.dat
trap 'rm -f "$DAT"' EXIT
awk -F'\t' 'function kilo(v) { return v % 1000 == 0 ? (v / 1000) "k" : v }
    NR > 1 {
        k = $1; if (!(k in seen)) { seen[k] = 1; keys[++n] = k; label[k] = "\"" kilo($2) "/" kilo($3) " s" $5 "\"" }
        d[k, $6 "-" $7] = $8; p[k, $6 "-" $7] = $10
    }
    END {
        for (i = 1; i <= n; i++) {
            k = keys[i]; line = label[k]
            split("tally-cold tally-warm redis-warm", t, " ")
            for (j = 1; j <= 3; j++) line = line " " (((k, t[j]) in d && d[k, t[j]] != "NaN") ? d[k, t[j]] : "NaN")
            for (j = 1; j <= 3; j++) line = line " " (((k, t[j]) in p && p[k, t[j]] != "NaN") ? p[k, t[j]] / 1000 : "NaN")
            print line
        }
    }' "$TSV" >"$DAT"
gnuplot <<GP
set terminal pngcairo size 1500,520 font "sans,10" noenhanced
set output "$PNG"
set multiplot layout 1,2 title "Many tenants: Zipf over tenants, 2 links each, 4 connections x 4 in flight (tallyd default settings on CPU 0, load on CPU 1)"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
set grid ytics
set key outside bottom center horizontal
set xlabel "tenants on disk / drawn, Zipf exponent s"
set title "decisions per second (admitted + refused)"
set ylabel "decisions/s (log)"
plot "$DAT" using 2:xtic(1) title "tally cold pass", "" using 3 title "tally measured", "" using 4 title "redis + Lua fixed window"
set title "p99 latency"
set ylabel "p99 ms (log)"
plot "$DAT" using 5:xtic(1) title "tally cold pass", "" using 6 title "tally measured", "" using 7 title "redis + Lua fixed window"
unset multiplot
GP
