# tally-bench: the binary-protocol load generator (bench/run uses it).
add_executable(tally-bench tally_bench.c)
target_link_libraries(tally-bench PRIVATE tally_proto tally_warnings)
