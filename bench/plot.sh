#!/usr/bin/env bash
# bench/plot.sh OUT IMG: draws IMG/throughput.png and IMG/p99.png from
# OUT/median.tsv: per setting, tally (strict, batched) against the echo server
# and redis + Lua (fixed window, GCRA); admit-heavy, refuse-heavy and 100 hot
# links side by side.
set -euo pipefail
OUT=$1
IMG=$2
TARGETS=""
for t in tally-strict tally-batched echo redis-fw redis-gcra; do
    grep -q "^$t	" "$OUT/median.tsv" && TARGETS="$TARGETS $t"
done
TARGETS=${TARGETS# }
NT=$(wc -w <<<"$TARGETS")
for mix in admit refuse hot100; do
    for col in 4 6; do # 4 decisions/s, 6 p99
        awk -F'\t' -v mix="$mix" -v col="$col" -v targets="$TARGETS" '
            BEGIN { nt = split(targets, t, " "); ns = split("1x1 50x1 50x16", s, " ") }
            ($2 == mix || $2 == "any") { v[$1, $3] = $col; have[$3] = 1 }
            END {
                for (i = 1; i <= ns; i++) {
                    if (!(s[i] in have))
                        continue
                    line = s[i]
                    for (j = 1; j <= nt; j++) line = line " " ((t[j], s[i]) in v ? v[t[j], s[i]] : "NaN")
                    print line
                }
            }' "$OUT/median.tsv" >"$OUT/plot-$mix-$col.dat"
    done
done
plot_one() { # FILE-COLUMN TITLE YLABEL PNG
    gnuplot <<GP
set terminal pngcairo size 1500,480 font "sans,10"
set output "$4"
set multiplot layout 1,3 title "$2 (medians; 1x1 on one CPU, others server CPU 0 / load CPU 1)"
set style data histogram
set style histogram clustered gap 1
set style fill solid 0.85 border -1
set boxwidth 0.9
set logscale y
$5
set grid ytics
set ylabel "$3"
set key top left
set xlabel "connections x in flight"
set title "admit-heavy, 10,000 links"
plot for [i=2:$((NT + 1))] "$OUT/plot-admit-$1.dat" using i:xtic(1) title word("$TARGETS", i-1)
set title "refuse-heavy, 10,000 links"
plot for [i=2:$((NT + 1))] "$OUT/plot-refuse-$1.dat" using i:xtic(1) title word("$TARGETS", i-1)
set title "admit-heavy, 100 links of one tenant"
plot for [i=2:$((NT + 1))] "$OUT/plot-hot100-$1.dat" using i:xtic(1) title word("$TARGETS", i-1)
unset multiplot
GP
}
plot_one 4 "Decisions per second" "decisions/s (log)" "$IMG/throughput.png" "set yrange [100:2e6]"
plot_one 6 "p99 latency" "p99 us (log)" "$IMG/p99.png" "set yrange [10:2e6]"
echo "pictures: $IMG/throughput.png $IMG/p99.png"
